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
