-- guard.lua: refuse commands that should never reach production through this proxy, and slow
-- down KEYS instead of letting it block the server for everyone. A lockkit proxy plugin.
--
--   lockkit proxy --upstream redis://127.0.0.1:6379 --plugin examples/plugins/guard.lua:250
--
-- ARGS (after the colon): how many milliseconds each KEYS waits before it is forwarded
-- (default 100). FLUSHALL, FLUSHDB and DEBUG are answered with an error by the proxy itself
-- and never forwarded; the report counts what was refused and delayed.
local keys_delay_ms = tonumber((...)) or 100
local refused, delayed = {}, 0

return {
  commands = { "FLUSHALL", "FLUSHDB", "DEBUG", "KEYS" },

  on_command = function(conn, cmd, args)
    if cmd == "KEYS" then
      delayed = delayed + 1
      return { delay_ms = keys_delay_ms }
    end
    refused[cmd] = (refused[cmd] or 0) + 1
    return { reply = redis.error_reply("ERR " .. cmd .. " is refused by the proxy's guard plugin") }
  end,

  report = function()
    return { refused = refused, keys_delayed = delayed, keys_delay_ms = keys_delay_ms }
  end,
}
