-- guard.lua: refuse commands that should never reach production through this proxy, and slow
-- down KEYS instead of letting it block the server for everyone. A lockkit proxy plugin.
--
--   lockkit proxy --upstream redis://127.0.0.1:6379 --plugin examples/plugins/guard.lua:250
--
-- ARGS (after the colon): how many milliseconds each KEYS waits before it is forwarded
-- (default 100). FLUSHALL, FLUSHDB and DEBUG sent by a client are never forwarded: the proxy
-- answers them with an error, and inside MULTI (where the client waits for QUEUED and the proxy
-- cannot answer for the server) the guard closes the connection, so the server drops the
-- transaction unrun. The report counts what was refused and delayed.
--
-- What it cannot stop: a script runs on the server, and the guard sees only EVAL, EVALSHA or
-- FCALL, never the commands inside (`redis.call('FLUSHALL')`, or a name built at run time;
-- EVALSHA and FCALL do not even carry the body). A proxy plugin filters what clients send, it
-- is not the server's access control: to stop these commands for real, remove them from the
-- application's user on the server (`ACL SETUSER app -flushall -flushdb -debug`), or
-- `rename-command` them in redis.conf.
local keys_delay_ms = tonumber((...)) or 100
local refused, delayed = {}, 0
-- Connections inside MULTI (by id): a refused command there closes the connection.
local in_multi = {}

return {
  commands = { "FLUSHALL", "FLUSHDB", "DEBUG", "KEYS", "MULTI", "EXEC", "DISCARD", "RESET" },

  on_command = function(conn, cmd, args)
    if cmd == "MULTI" then
      in_multi[conn.id] = true
      return nil
    elseif cmd == "EXEC" or cmd == "DISCARD" or cmd == "RESET" then
      in_multi[conn.id] = nil
      return nil
    elseif cmd == "KEYS" then
      delayed = delayed + 1
      return { delay_ms = keys_delay_ms }
    end
    refused[cmd] = (refused[cmd] or 0) + 1
    if in_multi[conn.id] then
      in_multi[conn.id] = nil
      return { close = true }
    end
    return { reply = redis.error_reply("ERR " .. cmd .. " is refused by the proxy's guard plugin") }
  end,

  report = function()
    return { refused = refused, keys_delayed = delayed, keys_delay_ms = keys_delay_ms }
  end,
}
