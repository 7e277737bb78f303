#!lua name=lockkit
-- lockkit's scripts as a Redis Function library. GENERATED from lua/*.lua by
-- lockkit::scripts::function_library(); edit the script files, not this one.

redis.register_function('lockkit_release', function(KEYS, ARGV)
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
end)

redis.register_function('lockkit_acquire_fair', function(KEYS, ARGV)
  -- acquire_fair.lua: take the lock in turn, first come first served, through a queue in Redis.
  --
  -- A caller finding the lock free takes it when the queue is empty or when it is the queue's
  -- head; otherwise it joins the queue (once, under its ticket) and is told its place. Every
  -- attempt renews the caller's lease in the queue; an entry whose lease ran out (a waiter that
  -- crashed, or gave up without leaving) is dropped here, so a dead waiter blocks the queue for
  -- at most its lease.
  --
  -- KEYS[1]  the lock key
  -- KEYS[2]  the queue: a sorted set of tickets scored by arrival number
  -- KEYS[3]  the leases: a sorted set of tickets scored by lease end (server time, ms); in Redis
  --          Cluster the three keys must share one hash slot (lockkit derives `{key}:...` names)
  -- ARGV[1]  the caller's ticket, also the lock's token once taken (a fresh random value per acquire)
  -- ARGV[2]  the TTL in milliseconds (a positive integer)
  -- ARGV[3]  the lease of a queue entry in milliseconds (a positive integer)
  -- ARGV[4]  optional: a channel to PUBLISH the head's ticket on when the lock is free but it is
  --          the head's turn, not the caller's (wakes a head that missed its turn)
  --
  -- Replies (array of two integers):
  --   {0, ttl}   acquired: the lock holds ARGV[1] for ttl ms; the caller left the queue
  --   {n, pttl}  queued at place n (1 = next); pttl is the lock's remaining TTL in ms as PTTL
  --              answers it: -2 when the lock is free and it is the head's turn, -1 for a key
  --              without a TTL
  local lease = tonumber(ARGV[3])
  if not lease or lease <= 0 then
    return redis.error_reply('ERR the lease (ARGV[3]) must be a positive number of milliseconds')
  end
  local time = redis.call('TIME')
  local now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
  for _, ticket in ipairs(redis.call('ZRANGEBYSCORE', KEYS[3], '-inf', '(' .. now)) do
    redis.call('ZREM', KEYS[2], ticket)
    redis.call('ZREM', KEYS[3], ticket)
  end
  local holder = redis.call('GET', KEYS[1])
  if holder == ARGV[1] then
    return {0, redis.call('PTTL', KEYS[1])}
  end
  local head = redis.call('ZRANGE', KEYS[2], 0, 0)[1]
  if not holder and (not head or head == ARGV[1]) then
    redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
    redis.call('ZREM', KEYS[2], ARGV[1])
    redis.call('ZREM', KEYS[3], ARGV[1])
    return {0, tonumber(ARGV[2])}
  end
  if not redis.call('ZSCORE', KEYS[2], ARGV[1]) then
    local last = redis.call('ZRANGE', KEYS[2], -1, -1, 'WITHSCORES')[2]
    redis.call('ZADD', KEYS[2], (tonumber(last) or 0) + 1, ARGV[1])
  end
  redis.call('ZADD', KEYS[3], now + lease, ARGV[1])
  for i = 2, 3 do
    if redis.call('PTTL', KEYS[i]) < lease then
      redis.call('PEXPIRE', KEYS[i], lease)
    end
  end
  if not holder and ARGV[4] then
    redis.pcall('PUBLISH', ARGV[4], head)
  end
  return {redis.call('ZRANK', KEYS[2], ARGV[1]) + 1, redis.call('PTTL', KEYS[1])}
end)

redis.register_function('lockkit_release_fair', function(KEYS, ARGV)
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
end)

redis.register_function('lockkit_leave_fair', function(KEYS, ARGV)
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
end)

redis.register_function('lockkit_semaphore_acquire', function(KEYS, ARGV)
  -- semaphore_acquire.lua: take one of N permits, each a lease of its own.
  --
  -- A semaphore is one sorted set: a member per holder (its token), scored by the server time in
  -- milliseconds at which that holder's lease ends. Every call first drops the leases that have
  -- ended, so a crashed holder's permit comes back when its lease runs out, and leaves the key's
  -- own TTL at the longest lease left: the key never outlives its last holder and never lives
  -- without a TTL.
  --
  -- KEYS[1]  the semaphore key (a sorted set, nothing else)
  -- ARGV[1]  the token for this permit (a fresh random value)
  -- ARGV[2]  the lease in milliseconds (a positive integer)
  -- ARGV[3]  how many permits the semaphore has (a positive integer)
  -- KEYS[2]  optional, fencing: a hash with a numbered slot per permit (1 to ARGV[3]); field `i`
  --          is slot i's fencing counter (it only grows), field `holder:i` the token that took
  --          slot i last. A permit is one slot: it takes a slot whose last holder's lease has
  --          ended, and draws that slot's next fencing token, so a resource that keeps the highest
  --          token per slot refuses a paused holder once the slot's next holder wrote. The hash
  --          has no TTL (the counters must outlive every lease) and at most 2 * ARGV[3] fields;
  --          in Redis Cluster it must share KEYS[1]'s hash tag
  --
  -- Replies (array of integers):
  --   {1, n}   acquired: ARGV[1] holds a permit for ARGV[2] ms; n holders now, this one included.
  --            The same call repeated while ARGV[1] still holds (a cluster client re-sends a
  --            command after a dropped connection) answers the same, its lease renewed
  --   {1, n, f, i}  acquired with KEYS[2]: the permit is slot i, its fencing token f. The same
  --            call repeated answers the slot and token the first one drew
  --   {0, n}   busy: n holders (ARGV[3] or more) hold a permit; nothing changed but the purge of
  --            ended leases
  local t = redis.call('TIME')
  local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  local key, token = KEYS[1], ARGV[1]
  local permits = tonumber(ARGV[3])
  redis.call('ZREMRANGEBYSCORE', key, '-inf', now)
  local held = redis.call('ZCARD', key)
  if redis.call('ZSCORE', key, token) == false then
    if held >= permits then
      return {0, held}
    end
    held = held + 1
  end
  local reply = {1, held}
  if KEYS[2] then
    local fence, mine, free = KEYS[2], nil, nil
    for i = 1, permits do
      local last = redis.call('HGET', fence, 'holder:' .. i)
      if last == token then
        mine = i
        break
      end
      if free == nil and (last == false or redis.call('ZSCORE', key, last) == false) then
        free = i
      end
    end
    if mine then
      reply = {1, held, tonumber(redis.call('HGET', fence, mine)) or 0, mine}
    elseif free then
      redis.call('HSET', fence, 'holder:' .. free, token)
      reply = {1, held, redis.call('HINCRBY', fence, free, 1), free}
    else
      return redis.error_reply('ERR no free permit slot: the semaphore is used with another number of permits')
    end
  end
  redis.call('ZADD', key, string.format('%d', now + tonumber(ARGV[2])), token)
  local last = redis.call('ZRANGE', key, -1, -1, 'WITHSCORES')
  redis.call('PEXPIRE', key, string.format('%d', tonumber(last[2]) - now))
  return reply
end)

redis.register_function('lockkit_semaphore_release', function(KEYS, ARGV)
  -- semaphore_release.lua: give back one permit. Removes the caller's lease only if it is still
  -- there, drops the leases that have ended and keeps the key's TTL at the longest lease left.
  --
  -- KEYS[1]  the semaphore key (a sorted set of holders' tokens scored by the end of their lease)
  -- ARGV[1]  the token of the permit
  -- ARGV[2]  optional: a channel to PUBLISH on after the permit was given back, so that waiters
  --          wake at once (lockkit passes `lockkit:released:<key>`); a refused PUBLISH does not
  --          undo the release
  --
  -- Replies (integer):
  --    1  released: ARGV[1] held a permit and no longer does
  --    0  not held: ARGV[1] holds no permit (its lease ended, or it never had one); nothing
  --       changed but the purge of ended leases
  local t = redis.call('TIME')
  local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  local key = KEYS[1]
  redis.call('ZREMRANGEBYSCORE', key, '-inf', now)
  if redis.call('ZREM', key, ARGV[1]) == 0 then
    return 0
  end
  local last = redis.call('ZRANGE', key, -1, -1, 'WITHSCORES')
  if last[2] then
    redis.call('PEXPIRE', key, string.format('%d', tonumber(last[2]) - now))
  end
  if ARGV[2] then
    redis.pcall('PUBLISH', ARGV[2], '1')
  end
  return 1
end)

redis.register_function('lockkit_semaphore_extend', function(KEYS, ARGV)
  -- semaphore_extend.lua: renew one permit's lease. Sets the caller's lease to end ARGV[2] ms
  -- from now only if it still holds a permit, drops the leases that have ended and keeps the
  -- key's TTL at the longest lease left.
  --
  -- KEYS[1]  the semaphore key (a sorted set of holders' tokens scored by the end of their lease)
  -- ARGV[1]  the token of the permit
  -- ARGV[2]  the new lease in milliseconds (a positive integer), counted from now
  --
  -- Replies (integer):
  --    1  extended: ARGV[1] holds its permit for ARGV[2] ms from now
  --    0  not held: ARGV[1] holds no permit (its lease ended: the permit may be someone else's
  --       now); nothing changed but the purge of ended leases
  local t = redis.call('TIME')
  local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  local key = KEYS[1]
  redis.call('ZREMRANGEBYSCORE', key, '-inf', now)
  if redis.call('ZSCORE', key, ARGV[1]) == false then
    return 0
  end
  redis.call('ZADD', key, 'XX', string.format('%d', now + tonumber(ARGV[2])), ARGV[1])
  local last = redis.call('ZRANGE', key, -1, -1, 'WITHSCORES')
  redis.call('PEXPIRE', key, string.format('%d', tonumber(last[2]) - now))
  return 1
end)

redis.register_function('lockkit_rw_acquire', function(KEYS, ARGV)
  -- rw_acquire.lua: take a read-write lock for reading (shared) or writing (exclusive).
  --
  -- A read-write lock is three keys in one hash slot: the readers (a sorted set of their tokens,
  -- each scored by the server time in milliseconds at which its lease ends), the writer (a
  -- string holding its token, with the writer's lease as its TTL) and the writers waiting (a
  -- sorted set of their tokens scored by the end of their claim). A writer that finds the lock
  -- busy leaves a claim there, and no new reader enters while a claim lasts: readers coming and
  -- going can not keep a writer out forever. Every call drops the leases and claims that have
  -- ended and keeps each sorted set's TTL at its longest entry: no key lives without a TTL.
  --
  -- KEYS[1]  the readers (the lock's name: its release channel is named after it)
  -- KEYS[2]  the writer, e.g. `{name}:lockkit-writer`
  -- KEYS[3]  the writers waiting, e.g. `{name}:lockkit-writers`
  -- ARGV[1]  the token for this hold (a fresh random value)
  -- ARGV[2]  the lease in milliseconds (a positive integer)
  -- ARGV[3]  `read` or `write`
  -- ARGV[4]  (write) how long a waiting writer's claim lasts, in milliseconds: each attempt
  --          leaves one (under its own token), and a writer that gets in clears them all (a
  --          writer still waiting leaves its claim again at its next attempt)
  -- KEYS[4]  optional, fencing: a counter (a string, INCR) that every hold taken draws its
  --          fencing token from, readers' and writers' alike. A writer gets in only when no
  --          reader's and no writer's lease is live, so its token is newer than every hold it
  --          follows: a resource that keeps the highest token of any access refuses a write of a
  --          paused holder once a later one came in. No TTL; in Redis Cluster it must share
  --          KEYS[1]'s hash tag
  --
  -- Replies (array of integers):
  --   {1, n}   acquired: ARGV[1] holds the lock for ARGV[2] ms; n readers now (0 for a writer).
  --            The same call repeated while ARGV[1] still holds (a re-sent command) answers the
  --            same, its lease renewed
  --   {1, n, f}  acquired with KEYS[4]: f is the hold's fencing token. The same call repeated
  --            answers the counter's value: for a writer the token it drew; for a reader a token
  --            at least its own and older than any writer's after it
  --   {0, 1}   busy: a writer holds the lock
  --   {0, 2}   busy (read): a writer waits for the lock, so no new reader enters
  --   {0, 3}   busy (write): readers hold the lock; the writer's claim is left (or renewed)
  local t = redis.call('TIME')
  local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  local readers, writer, waiting, token = KEYS[1], KEYS[2], KEYS[3], ARGV[1]
  local lease = tonumber(ARGV[2])
  local function keep_ttl(key)
    local last = redis.call('ZRANGE', key, -1, -1, 'WITHSCORES')
    if last[2] then
      redis.call('PEXPIRE', key, string.format('%d', tonumber(last[2]) - now))
    end
  end
  redis.call('ZREMRANGEBYSCORE', readers, '-inf', now)
  redis.call('ZREMRANGEBYSCORE', waiting, '-inf', now)
  local current = redis.call('GET', writer)
  if ARGV[3] == 'read' then
    local again = redis.call('ZSCORE', readers, token) ~= false
    if not again then
      if current then
        return {0, 1}
      end
      if redis.call('ZCARD', waiting) > 0 then
        return {0, 2}
      end
    end
    redis.call('ZADD', readers, string.format('%d', now + lease), token)
    keep_ttl(readers)
    local n = redis.call('ZCARD', readers)
    if KEYS[4] then
      if again then
        return {1, n, tonumber(redis.call('GET', KEYS[4]) or '0') or 0}
      end
      return {1, n, redis.call('INCR', KEYS[4])}
    end
    return {1, n}
  end
  if current ~= token then
    local busy = 0
    if current then
      busy = 1
    elseif redis.call('ZCARD', readers) > 0 then
      busy = 3
    end
    if busy > 0 then
      redis.call('ZADD', waiting, string.format('%d', now + tonumber(ARGV[4])), token)
      keep_ttl(waiting)
      return {0, busy}
    end
  end
  redis.call('SET', writer, token, 'PX', lease)
  redis.call('DEL', waiting)
  if KEYS[4] then
    if current == token then
      return {1, 0, tonumber(redis.call('GET', KEYS[4]) or '0') or 0}
    end
    return {1, 0, redis.call('INCR', KEYS[4])}
  end
  return {1, 0}
end)

redis.register_function('lockkit_rw_release', function(KEYS, ARGV)
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
end)

redis.register_function('lockkit_rw_extend', function(KEYS, ARGV)
  -- rw_extend.lua: renew the lease of a read-write lock held for reading or writing, only by its
  -- holder.
  --
  -- KEYS[1]  the readers (a sorted set of tokens scored by the end of their lease)
  -- KEYS[2]  the writer (a string holding its token)
  -- ARGV[1]  the token of the hold
  -- ARGV[2]  the new lease in milliseconds (a positive integer), counted from now
  -- ARGV[3]  `read` or `write`: how it is held
  --
  -- Replies (integer):
  --    1  extended: the hold lasts ARGV[2] ms from now
  --    0  not held: ARGV[1] holds no such lock (its lease ended); nothing changed
  --   -1  not yours (write): another token holds the lock for writing; nothing changed
  local t = redis.call('TIME')
  local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  local readers, writer, token = KEYS[1], KEYS[2], ARGV[1]
  if ARGV[3] == 'read' then
    redis.call('ZREMRANGEBYSCORE', readers, '-inf', now)
    if redis.call('ZSCORE', readers, token) == false then
      return 0
    end
    redis.call('ZADD', readers, 'XX', string.format('%d', now + tonumber(ARGV[2])), token)
    local last = redis.call('ZRANGE', readers, -1, -1, 'WITHSCORES')
    redis.call('PEXPIRE', readers, string.format('%d', tonumber(last[2]) - now))
    return 1
  end
  local current = redis.call('GET', writer)
  if current == false then
    return 0
  elseif current ~= token then
    return -1
  end
  redis.call('PEXPIRE', writer, ARGV[2])
  return 1
end)

redis.register_function('lockkit_rw_downgrade', function(KEYS, ARGV)
  -- rw_downgrade.lua: turn a write hold into a read hold in one step, under the same token, so
  -- no other writer can enter in between; waiting readers are woken (they may now share it).
  --
  -- KEYS[1]  the readers (a sorted set of tokens scored by the end of their lease)
  -- KEYS[2]  the writer (a string holding its token)
  -- ARGV[1]  the token of the write hold (it becomes the read hold's)
  -- ARGV[2]  the read hold's lease in milliseconds (a positive integer), counted from now
  -- ARGV[3]  optional: a channel to PUBLISH on after the downgrade (`lockkit:released:<name>`)
  --
  -- Replies (integer):
  --    1  downgraded: ARGV[1] now holds the lock for reading, for ARGV[2] ms
  --    0  not held: no writer holds the lock (the write lease ended); nothing changed
  --   -1  not yours: another token holds the lock for writing; nothing changed
  local t = redis.call('TIME')
  local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  local readers, writer, token = KEYS[1], KEYS[2], ARGV[1]
  local current = redis.call('GET', writer)
  if current == false then
    return 0
  elseif current ~= token then
    return -1
  end
  redis.call('DEL', writer)
  redis.call('ZREMRANGEBYSCORE', readers, '-inf', now)
  redis.call('ZADD', readers, string.format('%d', now + tonumber(ARGV[2])), token)
  local last = redis.call('ZRANGE', readers, -1, -1, 'WITHSCORES')
  redis.call('PEXPIRE', readers, string.format('%d', tonumber(last[2]) - now))
  if ARGV[3] then
    redis.pcall('PUBLISH', ARGV[3], '1')
  end
  return 1
end)

redis.register_function('lockkit_fenced_set', function(KEYS, ARGV)
  -- fenced_set.lua: a write that a resource in Redis accepts only from the newest lock holder.
  --
  -- The resource remembers the highest fencing token it has accepted (KEYS[2]) and refuses a
  -- write that carries an older one: a holder whose lock expired while it was paused, and which
  -- wakes up after the next holder (with a newer token from `acquire_fenced.lua`) has written,
  -- can not overwrite that write. The same token may write again (a holder's later writes).
  --
  -- KEYS[1]  the value to write (a string)
  -- KEYS[2]  the highest token accepted so far; in Redis Cluster it must share KEYS[1]'s hash
  --          tag, e.g. `{orders:42}:doc` and `{orders:42}:doc:fence`. It has no TTL: the resource
  --          must remember it as long as the value lives
  -- ARGV[1]  the writer's fencing token (a positive integer)
  -- ARGV[2]  the value
  --
  -- Replies (integer):
  --   1  written: ARGV[1] is at least the highest token seen; KEYS[1] holds ARGV[2] and KEYS[2]
  --      holds ARGV[1]
  --   0  refused: a newer token has written already; nothing changed
  --   an error for a token that is not a positive integer; nothing changed
  local token = tonumber(ARGV[1])
  if token == nil or token < 1 or token ~= math.floor(token) then
    return redis.error_reply('ERR the fencing token must be a positive integer')
  end
  local seen = tonumber(redis.call('GET', KEYS[2]) or '0') or 0
  if token < seen then
    return 0
  end
  redis.call('SET', KEYS[2], string.format('%d', token))
  redis.call('SET', KEYS[1], ARGV[2])
  return 1
end)
