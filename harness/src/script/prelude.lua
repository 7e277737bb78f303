-- The Redis 7.0 scripting environment, built once per harness (chunk name "=harness": the error
-- handler treats frames from this chunk as invisible, as Redis's own helpers are C functions).
local I = ...
local G = I.globals
local type, tostring, error, select, rawget, rawset = type, tostring, error, select, rawget, rawset
local setmetatable, getmetatable, next, pairs, unpack = setmetatable, getmetatable, next, pairs, unpack
local setfenv, loadstring, pcall, frame = setfenv, loadstring, pcall, I.frame
local floor, ceil, concat, xpcall = math.floor, math.ceil, table.concat, xpcall

-- `bad argument #n to 'f' (<what> expected, got <type>)`, raised at the caller's line as the C
-- function would (present: whether the argument was passed at all).
local function argerr(n, f, what, present, v)
  local got = present and type(v) or 'no value'
  -- Called from C (pcall), Lua cannot name the function.
  if frame(3) == 'C' then f = '?' end
  error('bad argument #' .. n .. " to '" .. f .. "' (" .. what .. ' expected, got ' .. got .. ')', 3)
end

-- luaL_checkint on a number: (int)(lua_Integer)x, as Redis's Lua on x86-64 computes it.
local function cint(x)
  if x ~= x or x >= 2^63 or x < -2^63 then return 0 end
  x = x >= 0 and floor(x) or ceil(x)
  x = x % 2^32
  if x >= 2^31 then x = x - 2^32 end
  return x
end

-- What Redis 7.0 does not offer.
for _, name in pairs({ 'print', 'dofile', 'loadfile', 'getfenv', 'setfenv', 'newproxy', 'module',
  'require', 'package', 'os', 'io', 'debug' }) do
  G[name] = nil
end

-- Rust functions raise their errors as userdata: `raised` tells a Redis error table ('table')
-- from a Lua error string ('text'). They arrive here already wrapped for any number of
-- arguments (libargs.rs, `packed`).
local raised = I.raised
local function wrap(f) return f end
-- A harness stop (time limit): nothing of the script may catch it, so pcall, xpcall and
-- coroutine.resume raise it again, and it reaches the top through every coroutine.
local function is_stop(e) return type(e) == 'userdata' and raised(e) == 'stop' end

-- The error handler Redis installs (__redis__err__handler): a table with err, source and line.
-- A harness stop (time limit, memory cap) passes through untouched: it may arrive with hooks off,
-- and nothing of the script may run then.
local function handler(err)
  if type(err) == 'userdata' then
    local kind, msg = raised(err)
    if kind == 'stop' or kind == 'memory' then return err end
    if kind == 'table' then err = { err = msg } elseif kind == 'text' then err = msg end
  end
  local lvl = 2
  local what, source, line = frame(lvl)
  if what == 'C' then lvl = 3; what, source, line = frame(lvl) end
  while source == '=harness' do
    lvl = lvl + 1
    what, source, line = frame(lvl)
  end
  if type(err) ~= 'table' then
    err = { err = 'ERR ' .. tostring(err) }
  end
  if what then
    err['source'] = source
    err['line'] = line
  end
  return err
end
G.__redis__err__handler = handler

-- pcall as Redis 7.0 overrides it: an error table with a string err yields that string.
local function pcall_fix(ok, ...)
  if ok then return ok, ... end
  local e = ...
  if type(e) == 'userdata' then
    local kind, msg = raised(e)
    if kind == 'stop' then error(e, 0) end
    if kind then return false, msg end
  end
  if type(e) == 'table' then
    local m = e.err
    if type(m) == 'string' or type(m) == 'number' then return false, m end
  end
  return false, e
end
G.pcall = function(...) return pcall_fix(pcall(...)) end

-- redis.*
local redis = {}
redis.call = I.call
redis.pcall = I.pcall
redis.sha1hex = wrap(I.sha1hex)
redis.log = wrap(I.log)
redis.setresp = wrap(I.setresp)
redis.set_repl = wrap(I.set_repl)
redis.acl_check_cmd = wrap(I.acl_check_cmd)
redis.replicate_commands = function() return true end
redis.breakpoint = function() return false end
redis.debug = function() end
local function single_field(field, ...)
  if select('#', ...) ~= 1 or type((...)) ~= 'string' then
    return { err = 'ERR wrong number or type of arguments' }
  end
  return { [field] = (...) }
end
redis.status_reply = function(...) return single_field('ok', ...) end
redis.error_reply = function(...)
  if select('#', ...) ~= 1 or type((...)) ~= 'string' then
    return { err = 'ERR wrong number or type of arguments' }
  end
  local e = ...
  if e:sub(1, 1) ~= '-' then e = '-' .. e end
  local code, msg = e:match('^%-([^ ]*) (.*)$')
  if not code then code, msg = 'ERR', e:sub(2) end
  msg = msg:gsub('[\r\n]+$', ''):gsub('^[\r\n]+', '')
  return { err = code .. ' ' .. msg }
end
redis.LOG_DEBUG, redis.LOG_VERBOSE, redis.LOG_NOTICE, redis.LOG_WARNING = 0, 1, 2, 3
redis.REPL_NONE, redis.REPL_AOF, redis.REPL_SLAVE, redis.REPL_REPLICA, redis.REPL_ALL = 0, 1, 2, 2, 3
redis.REDIS_VERSION = I.version
redis.REDIS_VERSION_NUM = I.version_num
G.redis = redis

-- Libraries implemented in Rust.
G.math.random = wrap(I.random)
G.string.rep = I.string_rep
-- Lua 5.1's pattern matching, ported to Rust so that the time limit can stop a backtracking
-- pattern (patterns.rs). gmatch keeps its position here, as the C closure keeps it in an upvalue.
G.string.find = I.str_find
G.string.match = I.str_match
G.string.gsub = I.str_gsub
local gmatch_step = I.gmatch_step
G.string.gmatch = function(...)
  local s, p = ...
  local n = select('#', ...)
  if type(s) ~= 'string' and type(s) ~= 'number' then argerr(1, 'gmatch', 'string', n > 0, s) end
  if type(p) ~= 'string' and type(p) ~= 'number' then argerr(2, 'gmatch', 'string', n > 1, p) end
  s, p = tostring(s), tostring(p)
  local pos = 0
  local function advance(next_pos, ...)
    if next_pos == nil then return end
    pos = next_pos
    return ...
  end
  return function() return advance(gmatch_step(s, p, pos)) end
end
-- Lua 5.1's gfind is gmatch under its old name (LUA_COMPAT_GFIND), the same function.
G.string.gfind = G.string.gmatch
G.math.randomseed = wrap(I.randomseed)
local bit = {}
for _, name in pairs({ 'tobit', 'tohex', 'bnot', 'band', 'bor', 'bxor', 'lshift', 'rshift',
  'arshift', 'rol', 'ror', 'bswap' }) do
  bit[name] = wrap(I.bit[name])
end
G.bit = bit
local cjson = { _NAME = 'cjson', _VERSION = '2.1.0' }
cjson.encode = wrap(I.cjson_encode)
cjson.decode = wrap(I.cjson_decode)
cjson.null = I.null
for _, name in pairs({ 'decode_invalid_numbers', 'decode_max_depth', 'encode_invalid_numbers',
  'encode_keep_buffer', 'encode_max_depth', 'encode_number_precision', 'encode_sparse_array', 'new' }) do
  local setting = I.cjson_settings[name]
  cjson[name] = setting and wrap(setting)
    or function() error('harness: cjson.' .. name .. ' is not emulated', 2) end
end
G.cjson = cjson
local struct = {}
struct.pack = wrap(I.struct_pack)
struct.unpack = wrap(I.struct_unpack)
struct.size = wrap(I.struct_size)
G.struct = struct
local cmsgpack = { _NAME = 'lua-cmsgpack', _VERSION = 'lua-cmsgpack 0.4.0',
  _COPYRIGHT = 'Copyright (C) 2012, Salvatore Sanfilippo',
  _DESCRIPTION = 'MessagePack C implementation for Lua' }
cmsgpack.pack = wrap(I.msgpack_pack)
cmsgpack.unpack = wrap(I.msgpack_unpack)
cmsgpack.unpack_one = wrap(I.msgpack_unpack_one)
cmsgpack.unpack_limit = wrap(I.msgpack_unpack_limit)
G.cmsgpack = cmsgpack

-- Read-only tables. Redis patches Lua to mark tables read-only; stock Lua 5.1 needs proxies:
-- reads go through to the real table, writes raise Redis's message.
local proxies = setmetatable({}, { __mode = 'k' })
local function readonly(t, missing)
  local proxy = {}
  setmetatable(t, missing)
  setmetatable(proxy, {
    __index = t,
    __newindex = function() error('Attempt to modify a readonly table', 2) end,
    __metatable = false,
  })
  proxies[proxy] = t
  return proxy
end

-- The script's view of the globals: a read-only proxy; an undefined global raises.
local missing_global = { __index = function(_, k)
  error("Script attempted to access nonexistent global variable '" .. tostring(k) .. "'", 2)
end }

local function real(t) return proxies[t] or t end
G.rawset = function(t, ...)
  if proxies[t] then error('Attempt to modify a readonly table', 0) end
  return rawset(t, ...)
end
G.rawget = function(t, ...) return rawget(real(t), ...) end
-- next, pairs and getmetatable answer with a protected table's contents, never the table itself.
local function next_(...)
  local t, k = ...
  if type(t) ~= 'table' then argerr(1, 'next', 'table', select('#', ...) > 0, t) end
  return next(real(t), k)
end
G.next = next_
G.pairs = function(...)
  local t = ...
  if type(t) ~= 'table' then argerr(1, 'pairs', 'table', select('#', ...) > 0, t) end
  if proxies[t] then return next_, t, nil end
  return next, t, nil
end
local metatables = {}
G.getmetatable = function(...)
  if select('#', ...) == 0 then
    error("bad argument #1 to '" .. (frame(2) == 'C' and '?' or 'getmetatable') .. "' (value expected)", 2)
  end
  local t = ...
  if proxies[t] then return metatables[t] end
  return getmetatable(t)
end
G.setmetatable = function(t, ...)
  if proxies[t] then error('Attempt to modify a readonly table', 0) end
  return setmetatable(t, ...)
end

-- unpack as Redis's Lua answers it, without stock Lua 5.1's integer overflow (a huge range
-- segfaults it): more than the C stack holds is 'too many results to unpack'.
G.unpack = function(...)
  local nargs = select('#', ...)
  local t, i, e = ...
  if type(t) ~= 'table' then argerr(1, 'unpack', 'table', nargs > 0, t) end
  local first, last = 1, nil
  if i ~= nil then
    first = tonumber(i)
    if not first then argerr(2, 'unpack', 'number', true, i) end
    first = cint(first)
  end
  if e ~= nil then
    last = tonumber(e)
    if not last then argerr(3, 'unpack', 'number', true, e) end
    last = cint(last)
  else
    last = #t
  end
  if first > last then return end
  if last - first + 1 + nargs > 8000 then error('too many results to unpack', 2) end
  -- The same arguments, so that the C stack check counts as for a direct call.
  if nargs <= 1 then return unpack(t) elseif nargs == 2 then return unpack(t, i) end
  return unpack(t, i, e)
end

-- xpcall as Lua 5.1's, but the handler runs after the stack unwinds, under the time limit
-- like any other code, and gets what Redis passes: a string, or the error table of redis.call.
local function as_lua_error(e)
  if type(e) == 'userdata' then
    local kind, msg = raised(e)
    if kind == 'table' then
      return { err = msg, ignore_error_stats_update = true }
    elseif kind == 'text' then
      return msg
    end
  end
  return e
end
local function xpcall_done(h, ok, ...)
  if ok then return true, ... end
  if is_stop((...)) then error((...), 0) end
  local hok, r = pcall(h, as_lua_error((...)))
  if hok then return false, r end
  return false, 'error in error handling'
end
G.xpcall = function(...)
  if select('#', ...) < 2 then
    error("bad argument #2 to '" .. (frame(2) == 'C' and '?' or 'xpcall') .. "' (value expected)", 2)
  end
  local f, h = ...
  return xpcall_done(h, pcall(f))
end

-- loadstring refuses bytecode (Redis 7.0 patched Lua's undump away) and compiles into the
-- script's environment.
local env
G.loadstring = function(s, name)
  if type(s) == 'string' and s:sub(1, 1) == '\27' then
    return loadstring(' ' .. s, name or s)
  end
  local f, e = loadstring(s, name)
  if f then setfenv(f, env) end
  return f, e
end
-- load reads the whole chunk first, so that bytecode is refused here as in loadstring.
local load = load
G.load = function(...)
  local reader, name = ...
  if type(reader) ~= 'function' then
    argerr(1, 'load', 'function', select('#', ...) > 0, reader)
  end
  local parts = {}
  while true do
    local ok, piece = pcall(reader)
    if not ok then
      if is_stop(piece) then error(piece, 0) end
      return nil, as_lua_error(piece)
    end
    if piece == nil or piece == '' then break end
    if type(piece) == 'number' then piece = tostring(piece) end
    if type(piece) ~= 'string' then return nil, 'reader function must return a string' end
    parts[#parts + 1] = piece
  end
  return G.loadstring(concat(parts), name or '=(load)')
end

-- coroutine.resume as Lua 5.1's, but a stop inside the coroutine stops the resumer too (see
-- is_stop), and an error raised by a Rust function arrives as Redis's (a string, or
-- redis.call's error table).
local resume = coroutine.resume
local function resumed(ok, ...)
  if ok then return true, ... end
  if is_stop((...)) then error((...), 0) end
  return false, as_lua_error((...))
end
G.coroutine.resume = function(...)
  local co = ...
  if type(co) ~= 'thread' then
    error("bad argument #1 to '" .. (frame(2) == 'C' and '?' or 'resume') .. "' (coroutine expected)", 2)
  end
  return resumed(resume(...))
end

-- table.insert as Lua 5.1's, but it never writes into a read-only table (the C function
-- writes raw, past the proxy's __newindex), and a position far below 1 moves only the keys
-- that exist instead of stepping through up to 2^31 slots in one C loop the time limit
-- cannot interrupt.
local insert = table.insert
G.table.insert = function(...)
  local n = select('#', ...)
  local t, pos, v = ...
  if type(t) ~= 'table' then argerr(1, 'insert', 'table', n > 0, t) end
  if n == 2 then
    if proxies[t] then error('Attempt to modify a readonly table', 0) end
    insert(t, pos)
    return
  end
  if n ~= 3 then error("wrong number of arguments to 'insert'", 2) end
  local p = tonumber(pos)
  if not p then argerr(2, 'insert', 'number', true, pos) end
  p = cint(p)
  if proxies[t] then error('Attempt to modify a readonly table', 0) end
  local e = #t + 1
  if p >= 1 or e - p <= 64 then
    insert(t, p, v)
    return
  end
  -- t[i] = t[i - 1] for i from e down to p + 1: only the integer keys in [p, e] change.
  local ks, vs = {}, {}
  for k, x in next, t do
    if type(k) == 'number' and k >= p and k <= e and k == floor(k) then
      ks[#ks + 1], vs[#vs + 1] = k, x
    end
  end
  for i = 1, #ks do rawset(t, ks[i], nil) end
  for i = 1, #ks do
    if ks[i] < e then rawset(t, ks[i] + 1, vs[i]) end
  end
  rawset(t, p, v)
end

-- collectgarbage as Lua 5.1's; a script that changes the collector (stop, setpause...) has it
-- put back as Redis leaves it before the next script runs (gc_changed). Arguments are checked
-- here, so that an error names the script's line, as the C function's does.
local collectgarbage, gc_changed = collectgarbage, I.gc_changed
local gc_options = { stop = true, restart = true, collect = true, count = true, step = true,
  setpause = true, setstepmul = true }
G.collectgarbage = function(...)
  local opt, arg = ...
  if opt ~= nil then
    if type(opt) ~= 'string' and type(opt) ~= 'number' then
      argerr(1, 'collectgarbage', 'string', true, opt)
    end
    if not gc_options[tostring(opt)] then
      error("bad argument #1 to '" .. (frame(2) == 'C' and '?' or 'collectgarbage') ..
        "' (invalid option '" .. tostring(opt) .. "')", 2)
    end
  end
  if arg ~= nil and not tonumber(arg) then argerr(2, 'collectgarbage', 'number', true, arg) end
  if opt ~= nil and opt ~= 'count' and opt ~= 'collect' and opt ~= 'step' then gc_changed() end
  local r = collectgarbage(...)
  return r
end

for _, lib in pairs({ 'string', 'table', 'math', 'coroutine', 'bit', 'cjson', 'struct', 'cmsgpack', 'redis' }) do
  G[lib] = readonly(G[lib], nil)
end
-- Strings index the (read-only) string library, as in Redis; getmetatable('') answers a
-- read-only view of their metatable.
local string_mt = getmetatable('')
string_mt.__index = G.string
string_mt.__metatable = readonly(string_mt, nil)
env = readonly(G, missing_global)
metatables[env] = readonly(missing_global, nil)
G._G = env

-- Function libraries share one environment. While FUNCTION LOAD runs a library's top level,
-- it sees only a `redis` that offers registration and logging, as Redis 7.0 runs it (every
-- other global is nonexistent); when its functions run, every global and the whole `redis`.
local loading_redis = nil
local fenv_missing = { __index = function(_, k)
  if loading_redis then
    if k == 'redis' then return loading_redis end
    error("Script attempted to access nonexistent global variable '" .. tostring(k) .. "'", 2)
  end
  if k == 'redis' then return rawget(G, 'redis') end
  local v = rawget(G, k)
  if v == nil then
    error("Script attempted to access nonexistent global variable '" .. tostring(k) .. "'", 2)
  end
  return v
end }
local fenv = readonly({}, fenv_missing)
local function load_env(register)
  if register == nil then loading_redis = nil; return fenv end
  local r = { register_function = register, log = redis.log, REDIS_VERSION = I.version,
    REDIS_VERSION_NUM = I.version_num, LOG_DEBUG = 0, LOG_VERBOSE = 1, LOG_NOTICE = 2, LOG_WARNING = 3 }
  loading_redis = readonly(r, missing_global)
  return fenv
end

-- Runs a compiled script under the handler: (true, result...) or (false, {err, source, line}).
-- The error's fields are read here, while the time limit and memory cap still hold: a
-- metamethod of a script's error object is script code.
-- An error object whose metamethod raises answers with that error (a stop passes through).
local function fields(e) return e.err, e.source, e.line end
local function finish(ok, ...)
  if ok then return ok, ... end
  local e = ...
  if type(e) ~= 'table' then return false, e end
  local read, m, source, line = pcall(fields, e)
  if not read then
    if type(m) == 'table' then m = nil end
    return false, m
  end
  return false, { err = m, source = source, line = line }
end
local function run(f) return finish(xpcall(f, handler)) end
local function run_fn(f, keys, argv)
  return finish(xpcall(function() return f(keys, argv) end, handler))
end
return env, run, run_fn, G, load_env
