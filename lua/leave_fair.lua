-- leave_fair.lua: a waiter gives up its place in the queue of acquire_fair.lua.
--
-- When it was the head, the next waiter is told at once that its turn has come, so a waiter
-- that gave up never holds up the one behind it.
--
-- KEYS[1]  the lock key
-- KEYS[2]  the queue (see acquire_fair.lua)
-- KEYS[3]  the leases (see acquire_fair.lua)
-- ARGV[1]  the waiter's ticket
-- ARGV[2]  optional: a channel to PUBLISH the new head's ticket on when the leaving waiter was
--          the head
--
-- Replies (integer):
--    1  left: the ticket was in the queue and is not anymore
--    0  not queued: nothing changed
local head = redis.call('ZRANGE', KEYS[2], 0, 0)[1]
redis.call('ZREM', KEYS[3], ARGV[1])
if redis.call('ZREM', KEYS[2], ARGV[1]) == 0 then
  return 0
end
if head == ARGV[1] and ARGV[2] then
  local next = redis.call('ZRANGE', KEYS[2], 0, 0)[1]
  if next then
    redis.pcall('PUBLISH', ARGV[2], next)
  end
end
return 1
