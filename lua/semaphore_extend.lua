-- semaphore_extend.lua: renew one permit's lease. Sets the caller's lease to end ARGV[2] ms
-- from now only if it still holds a permit, drops the leases that have ended and keeps the
-- key's TTL at the longest lease left.
--
-- KEYS[1]  the semaphore key (a sorted set of holders' tokens scored by the end of their lease)
-- ARGV[1]  the token of the permit
-- ARGV[2]  the new lease in milliseconds (a positive integer), counted from now
--
-- Replies (integer):
--    1  extended: ARGV[1] holds its permit for ARGV[2] ms from now
--    0  not held: ARGV[1] holds no permit (its lease ended: the permit may be someone else's
--       now); nothing changed but the purge of ended leases
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local key = KEYS[1]
redis.call('ZREMRANGEBYSCORE', key, '-inf', now)
if redis.call('ZSCORE', key, ARGV[1]) == false then
  return 0
end
redis.call('ZADD', key, 'XX', string.format('%d', now + tonumber(ARGV[2])), ARGV[1])
local last = redis.call('ZRANGE', key, -1, -1, 'WITHSCORES')
redis.call('PEXPIRE', key, string.format('%d', tonumber(last[2]) - now))
return 1
