-- semaphore_release.lua: give back one permit. Removes the caller's lease only if it is still
-- there, drops the leases that have ended and keeps the key's TTL at the longest lease left.
--
-- KEYS[1]  the semaphore key (a sorted set of holders' tokens scored by the end of their lease)
-- ARGV[1]  the token of the permit
-- ARGV[2]  optional: a channel to PUBLISH on after the permit was given back, so that waiters
--          wake at once (lockkit passes `lockkit:released:<key>`); a refused PUBLISH does not
--          undo the release
--
-- Replies (integer):
--    1  released: ARGV[1] held a permit and no longer does
--    0  not held: ARGV[1] holds no permit (its lease ended, or it never had one); nothing
--       changed but the purge of ended leases
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local key = KEYS[1]
redis.call('ZREMRANGEBYSCORE', key, '-inf', now)
if redis.call('ZREM', key, ARGV[1]) == 0 then
  return 0
end
local last = redis.call('ZRANGE', key, -1, -1, 'WITHSCORES')
if last[2] then
  redis.call('PEXPIRE', key, string.format('%d', tonumber(last[2]) - now))
end
if ARGV[2] then
  redis.pcall('PUBLISH', ARGV[2], '1')
end
return 1
