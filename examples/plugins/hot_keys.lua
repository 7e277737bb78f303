-- hot_keys.lua: which keys does the application hit most? A lockkit proxy plugin.
--
--   lockkit proxy --upstream redis://127.0.0.1:6379 --plugin examples/plugins/hot_keys.lua:5
--
-- ARGS (after the colon): how many keys the report lists (default 10). The report
-- (DIR/hot_keys-<date>.json) lists them with their command counts and the slowest reply seen.
local top_n = tonumber((...)) or 10
local hits, slowest_us, distinct = {}, {}, 0
local MAX_KEYS = 100000   -- stay well inside the plugin's memory cap

return {
  commands = { "GET", "SET", "INCR", "DEL", "HGET", "HSET", "EXPIRE", "PEXPIRE" },

  on_reply = function(conn, cmd, args, reply, latency_us)
    local key = args[1]
    if not key then return end
    if hits[key] == nil then
      if distinct >= MAX_KEYS then return end
      distinct = distinct + 1
      hits[key], slowest_us[key] = 0, 0
    end
    hits[key] = hits[key] + 1
    if latency_us > slowest_us[key] then slowest_us[key] = latency_us end
  end,

  report = function()
    local keys = {}
    for k in pairs(hits) do keys[#keys + 1] = k end
    table.sort(keys, function(a, b)
      if hits[a] ~= hits[b] then return hits[a] > hits[b] end
      return a < b
    end)
    local out = {}
    for i = 1, math.min(top_n, #keys) do
      local k = keys[i]
      out[i] = { key = k, commands = hits[k], slowest_reply_us = slowest_us[k] }
    end
    return { distinct_keys = distinct, top = out }
  end,
}
