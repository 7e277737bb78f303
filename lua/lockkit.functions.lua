#!lua name=lockkit
-- lockkit's scripts as a Redis Function library. GENERATED from lua/*.lua by
-- lockkit::scripts::function_library(); edit the script files, not this one.

redis.register_function('lockkit_release', function(KEYS, ARGV)
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
end)

redis.register_function('lockkit_extend', function(KEYS, ARGV)
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
end)

redis.register_function('lockkit_acquire_fenced', function(KEYS, ARGV)
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
  --   n > 0  acquired: the lock now holds ARGV[1] for ARGV[2] ms; n is the fencing token
  --   0      taken: the lock is held by someone else; nothing changed (the counter did not move)
  if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
    return redis.call('INCR', KEYS[2])
  end
  return 0
end)
