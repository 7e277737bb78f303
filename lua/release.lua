-- release.lua: compare-and-delete. Deletes the lock only if it still holds the caller's token.
--
-- KEYS[1]  the lock key
-- KEYS[2]  optional: a "released" marker, in KEYS[1]'s hash slot (lockkit passes
--          `{key}:lockkit-released` in a Redis Cluster, whose client may re-send a command that
--          already ran). A release writes its token there for ARGV[2] ms, and a repeat of the same
--          release that finds the key gone and its token there answers 1, not 0.
-- ARGV[1]  the token the caller got when it acquired the lock
-- ARGV[2]  with KEYS[2]: how long the marker lives, in milliseconds (a positive integer)
-- ARGV[2]  (ARGV[3] with KEYS[2]) optional: a channel to PUBLISH on after the delete, so that
--          waiters subscribed to it wake at once instead of polling (lockkit passes
--          `lockkit:released:<key>`). Published only when the lock was really deleted; a refused
--          PUBLISH (an ACL without the channel) does not undo the release.
--
-- Replies (integer):
--    1  released: the key held ARGV[1] and was deleted (or, with KEYS[2], this token's release
--       already deleted it)
--    0  not held: the key does not exist (expired, or never taken); nothing changed
--   -1  not yours: the key holds another token (it expired and someone else took it); nothing changed
local marker, channel = KEYS[2], ARGV[2]
if marker then
  channel = ARGV[3]
end
local current = redis.call('GET', KEYS[1])
if current == ARGV[1] then
  redis.call('DEL', KEYS[1])
  if marker then
    redis.call('SET', marker, ARGV[1], 'PX', ARGV[2])
  end
  if channel then
    redis.pcall('PUBLISH', channel, '1')
  end
  return 1
elseif current == false then
  if marker and redis.call('GET', marker) == ARGV[1] then
    return 1
  end
  return 0
else
  return -1
end
