-- semaphore_acquire.lua: take one of N permits, each a lease of its own.
--
-- A semaphore is one sorted set: a member per holder (its token), scored by the server time in
-- milliseconds at which that holder's lease ends. Every call first drops the leases that have
-- ended, so a crashed holder's permit comes back when its lease runs out, and leaves the key's
-- own TTL at the longest lease left: the key never outlives its last holder and never lives
-- without a TTL.
--
-- KEYS[1]  the semaphore key (a sorted set, nothing else)
-- ARGV[1]  the token for this permit (a fresh random value)
-- ARGV[2]  the lease in milliseconds (a positive integer)
-- ARGV[3]  how many permits the semaphore has (a positive integer)
--
-- Replies (array of two integers):
--   {1, n}   acquired: ARGV[1] holds a permit for ARGV[2] ms; n holders now, this one included.
--            The same call repeated while ARGV[1] still holds (a cluster client re-sends a
--            command after a dropped connection) answers the same, its lease renewed
--   {0, n}   busy: n holders (ARGV[3] or more) hold a permit; nothing changed but the purge of
--            ended leases
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local key, token = KEYS[1], ARGV[1]
redis.call('ZREMRANGEBYSCORE', key, '-inf', now)
local held = redis.call('ZCARD', key)
if redis.call('ZSCORE', key, token) == false then
  if held >= tonumber(ARGV[3]) then
    return {0, held}
  end
  held = held + 1
end
redis.call('ZADD', key, string.format('%d', now + tonumber(ARGV[2])), token)
local last = redis.call('ZRANGE', key, -1, -1, 'WITHSCORES')
redis.call('PEXPIRE', key, string.format('%d', tonumber(last[2]) - now))
return {1, held}
