-- extend.lua: compare-and-PEXPIRE. Resets the lock's TTL only if it still holds the caller's token.
--
-- KEYS[1]  the lock key
-- ARGV[1]  the token the caller got when it acquired the lock
-- ARGV[2]  the new TTL in milliseconds (a positive integer), counted from now
--
-- Replies (integer):
--    1  extended: the key held ARGV[1]; its TTL is now ARGV[2] ms
--    0  not held: the key does not exist (expired, or never taken); nothing changed
--   -1  not yours: the key holds another token; nothing changed
local current = redis.call('GET', KEYS[1])
if current == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return 1
elseif current == false then
  return 0
else
  return -1
end
