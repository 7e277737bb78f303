-- The Redis 7.0 scripting environment, built once per harness (chunk name "=harness": the error
-- handler treats frames from this chunk as invisible, as Redis's own helpers are C functions).
local I = ...
local G = I.globals
local type, tostring, error, select, rawget, rawset = type, tostring, error, select, rawget, rawset
local setmetatable, getmetatable, next, pairs, unpack = setmetatable, getmetatable, next, pairs, unpack
local setfenv, loadstring, pcall, frame = setfenv, loadstring, pcall, I.frame

-- What Redis 7.0 does not offer.
for _, name in pairs({ 'print', 'dofile', 'loadfile', 'getfenv', 'setfenv', 'newproxy', 'module',
  'require', 'package', 'os', 'io', 'debug' }) do
  G[name] = nil
end

-- Rust functions raise their errors as userdata: `raised` tells a Redis error table ('table')
-- from a Lua error string ('text').
local raised = I.raised
local function wrap(f) return f end

-- The error handler Redis installs (__redis__err__handler): a table with err, source and line.
local function handler(err)
  if type(err) == 'userdata' then
    local kind, msg = raised(err)
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
  cjson[name] = function() error('harness: cjson.' .. name .. ' is not emulated', 2) end
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
cmsgpack.unpack_one = function() error('harness: cmsgpack.unpack_one is not emulated', 2) end
cmsgpack.unpack_limit = function() error('harness: cmsgpack.unpack_limit is not emulated', 2) end
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
G.next = function(t, ...) return next(real(t), ...) end
G.pairs = function(t)
  local r = real(t)
  if r ~= t then return next, r, nil end
  return pairs(t)
end
G.setmetatable = function(t, ...)
  if proxies[t] then error('Attempt to modify a readonly table', 0) end
  return setmetatable(t, ...)
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
local load = load
G.load = function(...)
  local f, e = load(...)
  if f then setfenv(f, env) end
  return f, e
end

for _, lib in pairs({ 'string', 'table', 'math', 'coroutine', 'bit', 'cjson', 'struct', 'cmsgpack', 'redis' }) do
  G[lib] = readonly(G[lib], nil)
end
-- Strings index the (read-only) string library, as in Redis.
getmetatable('').__index = G.string
env = readonly(G, missing_global)
G._G = env

-- Function libraries share one environment. While FUNCTION LOAD runs a library's code, `redis`
-- offers only registration and logging; when its functions run, the whole `redis` table.
local loading_redis = nil
local fenv_missing = { __index = function(_, k)
  if k == 'redis' then return loading_redis or rawget(G, 'redis') end
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

-- Runs a compiled script under the handler: (true, result) or (false, error table).
local xpcall = xpcall
local function run(f) return xpcall(f, handler) end
local function run_fn(f, keys, argv) return xpcall(function() return f(keys, argv) end, handler) end
return env, run, run_fn, G, load_env
