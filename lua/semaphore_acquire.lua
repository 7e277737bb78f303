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
-- KEYS[2]  optional, fencing: a hash with a numbered slot per permit (1 to ARGV[3]); field `i`
--          is slot i's fencing counter (it only grows), field `holder:i` the token that took
--          slot i last. A permit is one slot: it takes a slot whose last holder's lease has
--          ended, and draws that slot's next fencing token, so a resource that keeps the highest
--          token per slot refuses a paused holder once the slot's next holder wrote. The hash
--          has no TTL (the counters must outlive every lease) and at most 2 * ARGV[3] fields;
--          in Redis Cluster it must share KEYS[1]'s hash tag
--
-- Replies (array of integers):
--   {1, n}   acquired: ARGV[1] holds a permit for ARGV[2] ms; n holders now, this one included.
--            The same call repeated while ARGV[1] still holds (a cluster client re-sends a
--            command after a dropped connection) answers the same, its lease renewed
--   {1, n, f, i}  acquired with KEYS[2]: the permit is slot i, its fencing token f. The same
--            call repeated answers the slot and token the first one drew
--   {0, n}   busy: n holders (ARGV[3] or more) hold a permit; nothing changed but the purge of
--            ended leases
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local key, token = KEYS[1], ARGV[1]
local permits = tonumber(ARGV[3])
redis.call('ZREMRANGEBYSCORE', key, '-inf', now)
local held = redis.call('ZCARD', key)
if redis.call('ZSCORE', key, token) == false then
  if held >= permits then
    return {0, held}
  end
  held = held + 1
end
local reply = {1, held}
if KEYS[2] then
  local fence, mine, free = KEYS[2], nil, nil
  for i = 1, permits do
    local last = redis.call('HGET', fence, 'holder:' .. i)
    if last == token then
      mine = i
      break
    end
    if free == nil and (last == false or redis.call('ZSCORE', key, last) == false) then
      free = i
    end
  end
  if mine then
    reply = {1, held, tonumber(redis.call('HGET', fence, mine)) or 0, mine}
  elseif free then
    redis.call('HSET', fence, 'holder:' .. free, token)
    reply = {1, held, redis.call('HINCRBY', fence, free, 1), free}
  else
    return redis.error_reply('ERR no free permit slot: the semaphore is used with another number of permits')
  end
end
redis.call('ZADD', key, string.format('%d', now + tonumber(ARGV[2])), token)
local last = redis.call('ZRANGE', key, -1, -1, 'WITHSCORES')
redis.call('PEXPIRE', key, string.format('%d', tonumber(last[2]) - now))
return reply
