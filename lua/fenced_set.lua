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
