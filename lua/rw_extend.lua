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
