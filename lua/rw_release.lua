-- rw_release.lua: give back a read-write lock held for reading or writing, only by its holder.
--
-- KEYS[1]  the readers (a sorted set of tokens scored by the end of their lease)
-- KEYS[2]  the writer (a string holding its token)
-- ARGV[1]  the token of the hold
-- ARGV[2]  `read` or `write`: how it is held
-- ARGV[3]  optional: a channel to PUBLISH on after the release, so that waiters wake at once
--          (lockkit passes `lockkit:released:<name>`); a refused PUBLISH does not undo it
--
-- Replies (integer):
--    1  released
--    0  not held: ARGV[1] holds no such lock (its lease ended, or it never had one)
--   -1  not yours (write): another token holds the lock for writing; nothing changed
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local readers, writer, token = KEYS[1], KEYS[2], ARGV[1]
if ARGV[2] == 'read' then
  redis.call('ZREMRANGEBYSCORE', readers, '-inf', now)
  if redis.call('ZREM', readers, token) == 0 then
    return 0
  end
  local last = redis.call('ZRANGE', readers, -1, -1, 'WITHSCORES')
  if last[2] then
    redis.call('PEXPIRE', readers, string.format('%d', tonumber(last[2]) - now))
  end
else
  local current = redis.call('GET', writer)
  if current == false then
    return 0
  elseif current ~= token then
    return -1
  end
  redis.call('DEL', writer)
end
if ARGV[3] then
  redis.pcall('PUBLISH', ARGV[3], '1')
end
return 1
