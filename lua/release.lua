-- release.lua: compare-and-delete. Deletes the lock only if it still holds the caller's token.
--
-- KEYS[1]  the lock key
-- ARGV[1]  the token the caller got when it acquired the lock
--
-- Replies (integer):
--    1  released: the key held ARGV[1] and was deleted
--    0  not held: the key does not exist (expired, or never taken); nothing changed
--   -1  not yours: the key holds another token (it expired and someone else took it); nothing changed
local current = redis.call('GET', KEYS[1])
if current == ARGV[1] then
  redis.call('DEL', KEYS[1])
  return 1
elseif current == false then
  return 0
else
  return -1
end
