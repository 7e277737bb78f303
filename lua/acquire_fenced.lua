-- acquire_fenced.lua: take the lock and draw a fencing token in one atomic step.
--
-- The fencing token is a counter that only ever grows (INCR), so a resource that remembers the
-- highest token it has accepted can refuse a write from a holder whose lock expired while it was
-- paused: that holder's token is lower than the one the next holder drew.
--
-- KEYS[1]  the lock key
-- KEYS[2]  the fencing counter key; in Redis Cluster it must share KEYS[1]'s hash tag,
--          e.g. `{orders:42}` and `{orders:42}:fence`
-- ARGV[1]  the token for this acquisition (a fresh random value)
-- ARGV[2]  the TTL in milliseconds (a positive integer)
--
-- Replies (integer):
--   n > 0  acquired: the lock now holds ARGV[1] for ARGV[2] ms; n is the fencing token. The same
--          call repeated while the lock still holds ARGV[1] (a cluster client re-sends a command
--          after a dropped connection) answers the token the first one drew, changing nothing
--   0      taken: the lock is held by someone else; nothing changed (the counter did not move)
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  return redis.call('INCR', KEYS[2])
end
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return tonumber(redis.call('GET', KEYS[2])) or 0
end
return 0
