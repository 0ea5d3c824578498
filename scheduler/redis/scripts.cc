#include "scheduler/redis/scripts.h"

namespace sandpool {

// Redis's own clock in milliseconds (scripts replicate their effects, so TIME is allowed).
#define SANDPOOL_LUA_NOW_MS "local t = redis.call('TIME'); local now_ms = t[1] * 1000 + math.floor(t[2] / 1000)\n"

// The completion record (PROTOCOL.md section 21), the one place it is built: sp_notify(prefix,
// target, job id, stored result bytes, ttl s, known) appends it to the stream <prefix>:notify:<name>
// of a target "<name>" or "<name>!" ("!": the record carries the result when it fits 64 KiB).
// FINISH and REJECT pass the outcome, exit code and error code of the result they store (known,
// from the daemon's JobResult: JobLedger's NotifySummary); for a result stored earlier (a
// resubmitted id) they are read from its bytes by a small msgpack reader (sp_summary; Redis's
// cmsgpack cannot read bin, and results carry their output as bin), which costs Redis about 15-30 µs.
// sp_targets(list) splits a job hash's space-separated `notify` list; sp_add(list, target) adds one
// (at most 16 different streams per job).
#define SANDPOOL_LUA_NOTIFY \
  "local function sp_summary(s)\n" \
  "  -- The reader is built here, not at every call of the script: only a resubmission needs it.\n" \
  "  local function sp_uint(s, i, n)\n" \
  "    local v = 0\n" \
  "    for k = i, i + n - 1 do v = v * 256 + string.byte(s, k) end\n" \
  "    return v\n" \
  "  end\n" \
  "  local sp_lens = {[0xc4] = 1, [0xc5] = 2, [0xc6] = 4, [0xd9] = 1, [0xda] = 2, [0xdb] = 4}\n" \
  "  local sp_ints = {[0xcc] = 1, [0xcd] = 2, [0xce] = 4, [0xcf] = 8, [0xd0] = 1, [0xd1] = 2, [0xd2] = 4, [0xd3] = 8}\n" \
  "  local sp_fixext = {[0xd4] = 1, [0xd5] = 2, [0xd6] = 4, [0xd7] = 8, [0xd8] = 16}\n" \
  "  local sp_ext = {[0xc7] = 1, [0xc8] = 2, [0xc9] = 4}\n" \
  "  -- The value at i (strings only when want), the index after it, and for an array or map the\n" \
  "  -- number of items that follow it.\n" \
  "  local function sp_read(s, i, want)\n" \
  "    local b = string.byte(s, i)\n" \
  "    if not b then return nil, i + 1 end\n" \
  "    if b <= 0x7f then return b, i + 1 end\n" \
  "    if b >= 0xe0 then return b - 256, i + 1 end\n" \
  "    if b >= 0xa0 and b <= 0xbf then return want and string.sub(s, i + 1, i + b - 0xa0), i + 1 + b - 0xa0 end\n" \
  "    if b >= 0x80 and b <= 0x8f then return nil, i + 1, (b - 0x80) * 2 end\n" \
  "    if b >= 0x90 and b <= 0x9f then return nil, i + 1, b - 0x90 end\n" \
  "    if b == 0xc0 then return nil, i + 1 end\n" \
  "    if b == 0xc2 or b == 0xc3 then return b == 0xc3, i + 1 end\n" \
  "    if sp_lens[b] then\n" \
  "      local n = sp_uint(s, i + 1, sp_lens[b])\n" \
  "      return want and string.sub(s, i + 1 + sp_lens[b], i + sp_lens[b] + n), i + 1 + sp_lens[b] + n\n" \
  "    end\n" \
  "    if sp_ints[b] then\n" \
  "      local v = sp_uint(s, i + 1, sp_ints[b])\n" \
  "      if b >= 0xd0 and v >= 2 ^ (8 * sp_ints[b] - 1) then v = v - 2 ^ (8 * sp_ints[b]) end\n" \
  "      return v, i + 1 + sp_ints[b]\n" \
  "    end\n" \
  "    if b == 0xca then return 0, i + 5 end\n" \
  "    if b == 0xcb then return 0, i + 9 end\n" \
  "    if b == 0xdc then return nil, i + 3, sp_uint(s, i + 1, 2) end\n" \
  "    if b == 0xdd then return nil, i + 5, sp_uint(s, i + 1, 4) end\n" \
  "    if b == 0xde then return nil, i + 3, 2 * sp_uint(s, i + 1, 2) end\n" \
  "    if b == 0xdf then return nil, i + 5, 2 * sp_uint(s, i + 1, 4) end\n" \
  "    if sp_fixext[b] then return nil, i + 2 + sp_fixext[b] end\n" \
  "    if sp_ext[b] then return nil, i + 2 + sp_ext[b] + sp_uint(s, i + 1, sp_ext[b]) end\n" \
  "    return nil, i + 1\n" \
  "  end\n" \
  "  local function sp_skip(s, i)\n" \
  "    local pending = 1\n" \
  "    while pending > 0 and i <= #s do\n" \
  "      local _, j, items = sp_read(s, i, false)\n" \
  "      pending = pending - 1 + (items or 0)\n" \
  "      i = j\n" \
  "    end\n" \
  "    return i\n" \
  "  end\n" \
  "  local out = {}\n" \
  "  local _, i, n = sp_read(s, 1, false)\n" \
  "  for _ = 1, (n or 0) / 2 do\n" \
  "    local k, v, j, m\n" \
  "    k, i = sp_read(s, i, true)\n" \
  "    local wanted = k == 'outcome' or k == 'exit_code' or k == 'error'\n" \
  "    v, j, m = sp_read(s, i, wanted)\n" \
  "    if m and k == 'error' then\n" \
  "      i = j\n" \
  "      for _ = 1, m / 2 do\n" \
  "        local ek, ev\n" \
  "        ek, i = sp_read(s, i, true)\n" \
  "        ev, j = sp_read(s, i, ek == 'code')\n" \
  "        if ek == 'code' and type(ev) == 'string' then out.error = ev end\n" \
  "        i = sp_skip(s, i)\n" \
  "      end\n" \
  "    else\n" \
  "      if wanted and k ~= 'error' then out[k] = v end\n" \
  "      i = sp_skip(s, i)\n" \
  "    end\n" \
  "  end\n" \
  "  return out\n" \
  "end\n" \
  "-- known: {outcome, exit_code (its decimal string, '' for none), error} when the caller has them\n" \
  "-- (a result it stores now), else nil: they are read from the stored result. size: the result's\n" \
  "-- length when res is not given (a staged result that FINISH moved into place without reading\n" \
  "-- it; known is then given).\n" \
  "local sp_notified = {}\n" \
  "local function sp_notify(prefix, target, id, res, ttl, known, size)\n" \
  "  if target == '' or not (res or (known and size)) then return end\n" \
  "  local name, want = target, false\n" \
  "  if string.sub(target, -1) == '!' then name = string.sub(target, 1, -2); want = true end\n" \
  "  local r = known or sp_summary(res)\n" \
  "  local f = {'id', id, 'outcome', type(r.outcome) == 'string' and r.outcome or 'error', 'exit_code', ''}\n" \
  "  if type(r.exit_code) == 'number' then f[6] = string.format('%d', r.exit_code)\n" \
  "  elseif type(r.exit_code) == 'string' then f[6] = r.exit_code end\n" \
  "  if r.error then f[#f + 1] = 'error'; f[#f + 1] = r.error end\n" \
  "  if want then\n" \
  "    if res and #res <= 65536 then f[#f + 1] = 'result'; f[#f + 1] = res\n" \
  "    else f[#f + 1] = 'result_bytes'; f[#f + 1] = tostring(res and #res or size) end\n" \
  "  end\n" \
  "  local key = prefix .. ':notify:' .. name\n" \
  "  redis.call('XADD', key, '*', unpack(f))\n" \
  "  sp_notified[key] = true\n" \
  "end\n" \
  "-- Every stream a record went to gets its TTL once, when the script ends.\n" \
  "local function sp_expire_notified(ttl)\n" \
  "  for key in pairs(sp_notified) do redis.call('EXPIRE', key, ttl) end\n" \
  "end\n" \
  "-- The message of an error caught by pcall (a Redis error reply is a table with `err`).\n" \
  "local function sp_error(e)\n" \
  "  if type(e) == 'table' and e.err then return e.err end\n" \
  "  return 'ERR ' .. tostring(e)\n" \
  "end\n" \
  "-- The fast paths (no list, a list of one) are the usual case, and Lua's pattern matching is\n" \
  "-- a large part of a job's share of these scripts (callgrind: 2.5% of Redis's instructions).\n" \
  "local function sp_targets(list)\n" \
  "  if not list or list == '' then return {} end\n" \
  "  if not string.find(list, '%s') then return {list} end\n" \
  "  local t = {}\n" \
  "  for x in string.gmatch(list, '%S+') do t[#t + 1] = x end\n" \
  "  return t\n" \
  "end\n" \
  "local function sp_add(list, target)\n" \
  "  if not list or list == '' then return target end\n" \
  "  local t = sp_targets(list)\n" \
  "  if target == '' then return table.concat(t, ' ') end\n" \
  "  for _, x in ipairs(t) do if x == target then return table.concat(t, ' ') end end\n" \
  "  if #t < 16 then t[#t + 1] = target end\n" \
  "  return table.concat(t, ' ')\n" \
  "end\n"

const char* const kClaimScript = SANDPOOL_LUA_NOTIFY R"lua(
local consumer, now_ms, ttl, prefix = ARGV[1], ARGV[2], ARGV[3], ARGV[4]
local function claim(job, res, entry, max_attempts, retry_own, target, id)
  if target ~= '' then
    -- A result exists (a resubmission of a finished job, one cancelled while queued): this
    -- entry's stream hears of it now.
    local stored = redis.call('GET', res)
    if stored then
      sp_notify(prefix, target, id, stored, ttl)
      return 'done', '0'
    end
  elseif redis.call('EXISTS', res) == 1 then
    return 'done', '0'
  end
  local h = redis.call('HMGET', job, 'entry', 'attempt', 'cancel', 'state', 'consumer', 'done_ms', 'cancel_ms', 'notify')
  if h[4] == 'done' then
    -- A run whose result expired: the id is free again. Its cancel flag is the old run's, unless
    -- it was set (with a time) after that run ended.
    local late_cancel = h[3] == '1' and h[6] and h[7] and tonumber(h[7]) > tonumber(h[6])
    redis.call('DEL', job)
    h = {false, false, late_cancel and '1' or false, false, false, false, false, false}
  end
  if h[1] and h[1] ~= entry then
    -- The entry that owns the id notifies this entry's stream too when it ends.
    if target ~= '' then redis.call('HSET', job, 'notify', sp_add(h[8], target)) end
    return 'dup', '0'
  end
  -- attempt stays a string: a Lua number given to redis.call or tostring is formatted as a
  -- float (printf's %.17g in redis.call, %.14g in tostring), about 3k instructions of Redis each.
  local attempt = h[2] or '0'
  local verdict = 'run'
  if h[3] == '1' then
    verdict = 'cancelled'
  elseif h[4] == 'running' and retry_own == '1' and h[5] == consumer then
    -- our own claim whose reply was lost: it never started, run it (same attempt)
  elseif h[4] == 'running' and tonumber(attempt) >= tonumber(max_attempts) then
    verdict = 'lost'
  elseif attempt == '0' then
    attempt = '1'
  else
    attempt = string.format('%d', tonumber(attempt) + 1)
  end
  local f = {'state', 'running', 'entry', entry, 'consumer', consumer, 'attempt', attempt, 'claimed_ms', now_ms}
  local targets = sp_add(h[8], target)
  if targets ~= '' then f[#f + 1] = 'notify'; f[#f + 1] = targets end
  if verdict == 'cancelled' then f[#f + 1] = 'cancel'; f[#f + 1] = '1' end
  redis.call('HSET', job, unpack(f))
  redis.call('EXPIRE', job, ttl)
  return verdict, attempt
end
local out = {}
for i = 0, #KEYS / 2 - 1 do
  local a = 5 + 5 * i
  local ok, verdict, attempt = pcall(claim, KEYS[2 * i + 1], KEYS[2 * i + 2], ARGV[a], ARGV[a + 1], ARGV[a + 2],
                                     ARGV[a + 3], ARGV[a + 4])
  if ok then
    out[#out + 1] = verdict; out[#out + 1] = attempt
  else
    out[#out + 1] = 'error'; out[#out + 1] = sp_error(verdict)
  end
end
sp_expire_notified(ttl)
return out
)lua";

const char* const kFinishScript = SANDPOOL_LUA_NOW_MS SANDPOOL_LUA_NOTIFY R"lua(
local consumer, ttl, group, prefix = ARGV[1], ARGV[2], ARGV[3], ARGV[4]
-- The streams to read after the results (the last keys), and how many entries of each.
local read_count, reads = ARGV[5], tonumber(ARGV[6])
local nkeys = #KEYS - reads
-- Who listens: nothing is published on a channel nobody is subscribed to at this moment (no
-- pattern subscriber at all, and PUBSUB NUMSUB says 0), which is what PUBLISH would deliver too.
local listened = nil
if redis.call('PUBSUB', 'NUMPAT') == 0 then
  local channels = {}
  for k = 4, nkeys, 4 do channels[#channels + 1] = KEYS[k] end
  local n = redis.call('PUBSUB', 'NUMSUB', unpack(channels))
  listened = {}
  for k = 1, #n, 2 do if n[k + 1] > 0 then listened[n[k]] = true end end
end
local function publish(channel, message)
  if not listened or listened[channel] then redis.call('PUBLISH', channel, message) end
end
local acks, streams = {}, {}
local function finish(k, a, live)
  local job, res, stream, out = KEYS[k], KEYS[k + 1], KEYS[k + 2], KEYS[k + 3]
  local entry, attempt, result, stage = ARGV[a], ARGV[a + 1], ARGV[a + 2], ARGV[a + 8]
  for i = a + 10, a + 9 + live do publish(out, ARGV[i]) end
  local h = redis.call('HMGET', job, 'consumer', 'attempt', 'entry', 'notify')
  if h[3] and h[3] ~= entry or h[1] and (h[1] ~= consumer or h[2] ~= attempt) then
    if stage ~= '' then redis.call('DEL', stage) end
    return h[3] and h[3] ~= entry and 'dup' or 'fenced'
  end
  if stage ~= '' then
    -- A large result, SET by the daemon at the stage key just before this call: moved into
    -- place, never made a Lua string (Redis's Lua hashes every byte of every string it makes).
    redis.call('RENAME', stage, res)
    redis.call('EXPIRE', res, ttl)
    result = nil
  else
    redis.call('SET', res, result, 'EX', ttl)
  end
  if h[1] and h[3] then
    -- The claim wrote entry, consumer and attempt, and they were just found equal.
    redis.call('HSET', job, 'state', 'done', 'done_ms', now_ms)
  else
    redis.call('HSET', job, 'state', 'done', 'entry', entry, 'consumer', consumer, 'attempt', attempt, 'done_ms', now_ms)
  end
  redis.call('EXPIRE', job, ttl)
  if ARGV[a + 3] ~= '' then publish(out, ARGV[a + 3]) end
  local known = nil
  if ARGV[a + 5] ~= '' then
    known = {outcome = ARGV[a + 5], exit_code = ARGV[a + 6], error = ARGV[a + 7] ~= '' and ARGV[a + 7] or nil}
  end
  local targets = sp_targets(h[4])
  local size = nil
  if #targets > 0 and not result then
    -- A staged result, for the records: its size, or its bytes when its summary must be read.
    if known then size = redis.call('STRLEN', res) else result = redis.call('GET', res) end
  end
  for _, target in ipairs(targets) do sp_notify(prefix, target, ARGV[a + 4], result, ttl, known, size) end
  if not acks[stream] then acks[stream] = {}; streams[#streams + 1] = stream end
  local ids = acks[stream]
  ids[#ids + 1] = entry
  return 'ok'
end
local out = {}
local a = 7
for k = 1, nkeys, 4 do
  local live = tonumber(ARGV[a + 9])
  local ok, verdict = pcall(finish, k, a, live)
  out[#out + 1] = ok and verdict or sp_error(verdict)
  a = a + 10 + live
end
-- Where the stream can be trimmed (XTRIM MINID: every entry before it goes): the group's oldest
-- pending entry, or, with nothing pending, the entry after the last one delivered. Every entry
-- before that point was delivered and is no longer pending, so it was acknowledged: its result is
-- stored (or it was a duplicate, forwarded or rejected), and the protocol has it deleted. nil when
-- the point cannot be named (no such stream or group; a sequence number beyond Lua's exact integers).
local function trim_point(stream)
  local groups = redis.pcall('XINFO', 'GROUPS', stream)  -- an error when the stream is gone
  if groups.err then return nil end
  for _, g in ipairs(groups) do
    local f = {}
    for i = 1, #g, 2 do f[g[i]] = g[i + 1] end
    if f.name == group then
      if f.pending > 0 then return redis.call('XPENDING', stream, group)[2] end
      local ms, seq = string.match(f['last-delivered-id'] or '', '^(%d+)-(%d+)$')
      if not seq or #seq > 15 then return nil end
      return ms .. '-' .. string.format('%d', tonumber(seq) + 1)
    end
  end
  return nil
end
-- A stream entry id's two numbers, as strings ("<ms>-<seq>", decimal without leading zeros). A
-- plain find, not a pattern: Lua's pattern matching costs several times more.
local function id_parts(id)
  local dash = string.find(id, '-', 1, true)
  return string.sub(id, 1, dash - 1), string.sub(id, dash + 1)
end
-- Whether stream entry id a comes before the point whose parts are bm, bs.
local function before(a, bm, bs)
  local am, as = id_parts(a)
  if #am ~= #bm then return #am < #bm end
  if am ~= bm then return am < bm end
  if #as ~= #bs then return #as < #bs end
  return as < bs
end
-- One XACK per stream for the whole batch; then its entries leave the stream. XDEL finds each
-- entry by walking its listpack node from the start (about 37k instructions of Redis per entry,
-- more than any other command a job costs), while XTRIM drops whole nodes and walks a partial one
-- once. So a batch of 4 or more trims up to the trim point and deletes only the entries at or
-- after it (finished while an older job still runs); a smaller batch deletes its entries, since
-- finding the point costs about as much as it saves there. Either way no acknowledged entry stays,
-- and the stream holds only queued and running jobs (PROTOCOL.md section 2).
for _, stream in ipairs(streams) do
  local ids = acks[stream]
  redis.call('XACK', stream, group, unpack(ids))
  local point = #ids >= 4 and trim_point(stream)
  if point then
    redis.call('XTRIM', stream, 'MINID', point)
    local pm, ps = id_parts(point)
    local after = {}
    for _, id in ipairs(ids) do if not before(id, pm, ps) then after[#after + 1] = id end end
    ids = after
  end
  if #ids > 0 then redis.call('XDEL', stream, unpack(ids)) end
end
sp_expire_notified(ttl)
if reads > 0 then
  -- The read that rides along: XREADGROUP without BLOCK, which a script may run. Its reply (nil
  -- when nothing was there, or its error) is the last element.
  local cmd = {'XREADGROUP', 'GROUP', group, consumer, 'COUNT', read_count, 'STREAMS'}
  for k = nkeys + 1, #KEYS do cmd[#cmd + 1] = KEYS[k] end
  for k = nkeys + 1, #KEYS do cmd[#cmd + 1] = '>' end
  out[#out + 1] = redis.pcall(unpack(cmd))
end
return out
)lua";

const char* const kRejectScript = SANDPOOL_LUA_NOTIFY R"lua(
local stored = ARGV[2]
local known = {outcome = ARGV[9], exit_code = ARGV[10], error = ARGV[11] ~= '' and ARGV[11] or nil}
if redis.call('EXISTS', KEYS[1]) == 0 then
  redis.call('SET', KEYS[1], ARGV[2], 'EX', ARGV[3])
  redis.call('PUBLISH', KEYS[3], ARGV[4])
elseif ARGV[7] ~= '' then
  stored = redis.call('GET', KEYS[1])
  known = nil  -- the stored result is another one: read it
end
if known and (not known.outcome or known.outcome == '') then known = nil end
sp_notify(ARGV[6], ARGV[7], ARGV[8], stored, ARGV[3], known)
sp_expire_notified(ARGV[3])
redis.call('XACK', KEYS[2], ARGV[5], ARGV[1])
redis.call('XDEL', KEYS[2], ARGV[1])
return 'ok'
)lua";

const char* const kCancelQueuedScript = SANDPOOL_LUA_NOW_MS R"lua(
if redis.call('EXISTS', KEYS[2]) == 1 then return 'done' end
local h = redis.call('HMGET', KEYS[1], 'state', 'cancel')
if h[1] == 'running' or h[1] == 'done' then return h[1] end
if h[2] ~= '1' then return 'not-cancelled' end
redis.call('SET', KEYS[2], ARGV[1], 'EX', ARGV[2])
redis.call('HSET', KEYS[1], 'state', 'done', 'consumer', ARGV[4], 'attempt', 0, 'done_ms', now_ms)
redis.call('EXPIRE', KEYS[1], ARGV[2])
redis.call('PUBLISH', KEYS[3], ARGV[3])
return 'ok'
)lua";

const char* const kRefreshScript = R"lua(
local lost = {}
for i = 1, #KEYS do
  local id = ARGV[i + 2]
  local p = redis.call('XPENDING', KEYS[i], ARGV[2], id, id, 1)
  if p[1] and p[1][2] == ARGV[1] then
    redis.call('XCLAIM', KEYS[i], ARGV[2], ARGV[1], 0, id, 'JUSTID')
  else
    lost[#lost + 1] = i
  end
end
return lost
)lua";

const char* const kForwardScript = R"lua(
local e = redis.call('XRANGE', KEYS[1], ARGV[1], ARGV[1])
local id = ''
if e[1] then
  local fields = e[1][2]
  local has_time = false
  for i = 1, #fields, 2 do
    if fields[i] == 'enqueued_ms' then has_time = true end
  end
  if not has_time then
    fields[#fields + 1] = 'enqueued_ms'
    fields[#fields + 1] = string.match(ARGV[1], '^(%d+)')
  end
  id = redis.call('XADD', KEYS[2], '*', unpack(fields))
  if redis.call('HGET', KEYS[3], 'entry') == ARGV[1] then redis.call('HSET', KEYS[3], 'entry', id) end
end
redis.call('XACK', KEYS[1], ARGV[2], ARGV[1])
redis.call('XDEL', KEYS[1], ARGV[1])
return id
)lua";

const char* const kCancelFlagsScript = R"lua(
local out = {}
for i = 1, #KEYS do
  if redis.call('HGET', KEYS[i], 'cancel') == '1' then out[#out + 1] = i end
end
return out
)lua";

#undef SANDPOOL_LUA_NOW_MS
#undef SANDPOOL_LUA_NOTIFY

const char* const kSessionRouteScript = R"lua(
local mine = redis.call('XPENDING', KEYS[1], ARGV[2], ARGV[1], ARGV[1], 1, ARGV[3])
if #mine == 0 then return 'gone' end
local holder = redis.call('HGET', KEYS[2], 'consumer')
if not holder then
  if ARGV[6] ~= 'create' then return 'none' end
  holder = ARGV[3]
  redis.call('HSET', KEYS[2], 'state', 'creating', 'consumer', holder, 'created_ms', ARGV[5], 'last_used_ms', ARGV[5])
  redis.call('SADD', KEYS[3], ARGV[9])
  redis.call('SADD', ARGV[10] .. holder, ARGV[9])
  redis.call('SADD', ARGV[11], holder)
end
local to = ARGV[4] .. holder
pcall(redis.call, 'XGROUP', 'CREATE', to, ARGV[2], '0', 'MKSTREAM')
redis.call('XADD', to, '*', 'id', ARGV[7], 'req', ARGV[8])
redis.call('XACK', KEYS[1], ARGV[2], ARGV[1])
redis.call('XDEL', KEYS[1], ARGV[1])
return holder
)lua";

const char* const kSessionExpireScript = R"lua(
if #redis.call('XRANGE', KEYS[1], ARGV[1], ARGV[1]) == 0 then return 'taken' end
if #redis.call('XPENDING', KEYS[1], ARGV[2], ARGV[1], ARGV[1], 1) > 0 then return 'taken' end
if redis.call('EXISTS', KEYS[2]) == 0 then
  redis.call('SET', KEYS[2], ARGV[3], 'EX', ARGV[4])
  redis.call('PUBLISH', KEYS[3], ARGV[5])
end
redis.call('XDEL', KEYS[1], ARGV[1])
return 'ok'
)lua";

const char* const kSessionLoseScript = R"lua(
local n = 0
for _, sid in ipairs(redis.call('SMEMBERS', KEYS[1])) do
  local key = ARGV[1] .. sid
  local state = redis.call('HGET', key, 'state')
  if state and state ~= 'destroyed' and state ~= 'lost' then
    redis.call('HSET', key, 'state', 'lost', 'error', ARGV[2])
    n = n + 1
  end
end
return n
)lua";

const char* const kSessionWriteScript = R"lua(
redis.call('HSET', KEYS[1], unpack(ARGV, 3))
redis.call('PERSIST', KEYS[1])
redis.call('SADD', KEYS[2], ARGV[1])
redis.call('SADD', KEYS[3], ARGV[1])
redis.call('SADD', KEYS[4], ARGV[2])
return 'ok'
)lua";

const char* const kSessionForgetScript = R"lua(
redis.call('HSET', KEYS[1], 'state', 'destroyed', 'consumer', ARGV[2])
redis.call('EXPIRE', KEYS[1], ARGV[3])
redis.call('SREM', KEYS[2], ARGV[1])
redis.call('SREM', KEYS[3], ARGV[1])
return 'ok'
)lua";

const std::vector<const char*>& AllScripts() {
  static const std::vector<const char*> all = {kClaimScript,      kFinishScript,       kRejectScript,
                                               kCancelQueuedScript, kRefreshScript,   kForwardScript,
                                               kCancelFlagsScript,  kSessionRouteScript, kSessionExpireScript,
                                               kSessionLoseScript, kSessionWriteScript, kSessionForgetScript};
  return all;
}

}  // namespace sandpool
