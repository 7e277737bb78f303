-- release.lua: compare-and-delete. Deletes the lock only if it still holds the caller's token.
--
-- KEYS[1]  the lock key
-- ARGV[1]  the token the caller got when it acquired the lock
-- ARGV[2]  optional: a channel to PUBLISH on after the delete, so that waiters subscribed to it
--          wake at once instead of polling (lockkit passes `lockkit:released:<key>`). Published
--          only when the lock was really deleted; a refused PUBLISH (an ACL without the channel)
--          does not undo the release.
--
-- Replies (integer):
--    1  released: the key held ARGV[1] and was deleted
--    0  not held: the key does not exist (expired, or never taken); nothing changed
--   -1  not yours: the key holds another token (it expired and someone else took it); nothing changed
local current = redis.call('GET', KEYS[1])
if current == ARGV[1] then
  redis.call('DEL', KEYS[1])
  if ARGV[2] then
    redis.pcall('PUBLISH', ARGV[2], '1')
  end
  return 1
elseif current == false then
  return 0
else
  return -1
end
