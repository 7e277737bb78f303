-- leave_fair.lua: a waiter gives up: it leaves the queue of acquire_fair.lua, and a lock held
-- under its ticket is released.
--
-- When it was the head, the next waiter is told at once that its turn has come, so a waiter
-- that gave up never holds up the one behind it. A lock holding the ticket was taken by an
-- attempt whose reply never reached the waiter (an acquire dropped mid-attempt): it was handed
-- to nobody, so it is deleted rather than left for its whole TTL.
--
-- KEYS[1]  the lock key
-- KEYS[2]  the queue (see acquire_fair.lua)
-- KEYS[3]  the leases (see acquire_fair.lua)
-- ARGV[1]  the waiter's ticket
-- ARGV[2]  optional: a channel to PUBLISH the new head's ticket on when the leaving waiter was
--          the head (or held the lock: then `1` when nobody waits)
--
-- Replies (integer):
--    2  released: the lock held ARGV[1] and was deleted (the ticket was not queued)
--    1  left: the ticket was in the queue and is not anymore
--    0  not queued: nothing changed
local head = redis.call('ZRANGE', KEYS[2], 0, 0)[1]
redis.call('ZREM', KEYS[3], ARGV[1])
if redis.call('ZREM', KEYS[2], ARGV[1]) == 0 then
  if redis.call('GET', KEYS[1]) ~= ARGV[1] then
    return 0
  end
  redis.call('DEL', KEYS[1])
  if ARGV[2] then
    redis.pcall('PUBLISH', ARGV[2], head or '1')
  end
  return 2
end
if head == ARGV[1] and ARGV[2] then
  local next = redis.call('ZRANGE', KEYS[2], 0, 0)[1]
  if next then
    redis.pcall('PUBLISH', ARGV[2], next)
  end
end
return 1
