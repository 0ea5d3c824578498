#include "scheduler/scripts.h"

namespace sandpool {

// Redis's own clock in milliseconds (scripts replicate their effects, so TIME is allowed).
#define SANDPOOL_LUA_NOW_MS "local t = redis.call('TIME'); local now_ms = t[1] * 1000 + math.floor(t[2] / 1000)\n"

const char* const kClaimScript = R"lua(
if redis.call('EXISTS', KEYS[2]) == 1 then return {'done', '0'} end
local h = redis.call('HMGET', KEYS[1], 'entry', 'attempt', 'cancel', 'state', 'consumer', 'done_ms', 'cancel_ms')
if h[4] == 'done' then
  -- A run whose result expired: the id is free again. Its cancel flag is the old run's, unless it
  -- was set (with a time) after that run ended.
  local late_cancel = h[3] == '1' and h[6] and h[7] and tonumber(h[7]) > tonumber(h[6])
  redis.call('DEL', KEYS[1])
  h = {false, false, late_cancel and '1' or false, false, false}
end
if h[1] and h[1] ~= ARGV[1] then return {'dup', '0'} end
local attempt = tonumber(h[2] or '0')
local verdict = 'run'
if h[3] == '1' then
  verdict = 'cancelled'
elseif h[4] == 'running' and ARGV[6] == '1' and h[5] == ARGV[2] then
  -- our own claim whose reply was lost: it never started, run it (same attempt)
elseif h[4] == 'running' and attempt >= tonumber(ARGV[5]) then
  verdict = 'lost'
else
  attempt = attempt + 1
end
redis.call('HSET', KEYS[1], 'state', 'running', 'entry', ARGV[1], 'consumer', ARGV[2],
           'attempt', attempt, 'claimed_ms', ARGV[3])
if verdict == 'cancelled' then redis.call('HSET', KEYS[1], 'cancel', '1') end
redis.call('EXPIRE', KEYS[1], ARGV[4])
return {verdict, tostring(attempt)}
)lua";

const char* const kFinishScript = SANDPOOL_LUA_NOW_MS R"lua(
for i = 9, 8 + tonumber(ARGV[8]) do redis.call('PUBLISH', KEYS[4], ARGV[i]) end
local h = redis.call('HMGET', KEYS[1], 'consumer', 'attempt', 'entry')
if h[3] and h[3] ~= ARGV[1] then return 'dup' end
if h[1] and (h[1] ~= ARGV[2] or h[2] ~= ARGV[3]) then return 'fenced' end
redis.call('SET', KEYS[2], ARGV[4], 'EX', ARGV[5])
redis.call('HSET', KEYS[1], 'state', 'done', 'entry', ARGV[1], 'consumer', ARGV[2], 'attempt', ARGV[3],
           'done_ms', now_ms)
redis.call('EXPIRE', KEYS[1], ARGV[5])
redis.call('PUBLISH', KEYS[4], ARGV[6])
redis.call('XACK', KEYS[3], ARGV[7], ARGV[1])
redis.call('XDEL', KEYS[3], ARGV[1])
return 'ok'
)lua";

const char* const kRejectScript = R"lua(
if redis.call('EXISTS', KEYS[1]) == 0 then
  redis.call('SET', KEYS[1], ARGV[2], 'EX', ARGV[3])
  redis.call('PUBLISH', KEYS[3], ARGV[4])
end
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
    lost[#lost + 1] = id
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

const std::vector<const char*>& AllScripts() {
  static const std::vector<const char*> all = {kClaimScript,      kFinishScript,       kRejectScript,
                                               kCancelQueuedScript, kRefreshScript,   kForwardScript,
                                               kCancelFlagsScript,  kSessionRouteScript, kSessionExpireScript,
                                               kSessionLoseScript};
  return all;
}

}  // namespace sandpool
