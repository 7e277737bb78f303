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
