-- release_fair.lua: compare-and-delete of a lock taken with acquire_fair.lua, then wake the
-- queue's head.
--
-- KEYS[1]  the lock key
-- KEYS[2]  the queue (see acquire_fair.lua)
-- KEYS[3]  the leases (see acquire_fair.lua)
-- KEYS[4]  optional: a "released" marker, as KEYS[2] of release.lua
-- ARGV[1]  the token the caller got when it acquired the lock
-- ARGV[2]  with KEYS[4]: how long the marker lives, in milliseconds (a positive integer)
-- ARGV[2]  (ARGV[3] with KEYS[4]) optional: a channel to PUBLISH on after the delete: the
--          ticket of the queue's head (the first whose lease has not run out), or `1` when
--          nobody waits. Published only when the lock was really deleted; a refused PUBLISH does
--          not undo the release.
--
-- Replies (integer):
--    1  released: the key held ARGV[1] and was deleted (or, with KEYS[4], this token's release
--       already deleted it)
--    0  not held: the key does not exist (expired, or never taken); nothing changed
--   -1  not yours: the key holds another token; nothing changed
local marker, channel = KEYS[4], ARGV[2]
if marker then
  channel = ARGV[3]
end
local current = redis.call('GET', KEYS[1])
if current == false then
  if marker and redis.call('GET', marker) == ARGV[1] then
    return 1
  end
  return 0
elseif current ~= ARGV[1] then
  return -1
end
redis.call('DEL', KEYS[1])
if marker then
  redis.call('SET', marker, ARGV[1], 'PX', ARGV[2])
end
if channel then
  local time = redis.call('TIME')
  local now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
  for _, ticket in ipairs(redis.call('ZRANGEBYSCORE', KEYS[3], '-inf', '(' .. now)) do
    redis.call('ZREM', KEYS[2], ticket)
    redis.call('ZREM', KEYS[3], ticket)
  end
  local head = redis.call('ZRANGE', KEYS[2], 0, 0)[1]
  redis.pcall('PUBLISH', channel, head or '1')
end
return 1
