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
