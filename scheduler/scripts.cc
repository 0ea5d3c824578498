#include "scheduler/scripts.h"

namespace sandpool {

const char* const kClaimScript = R"lua(
if redis.call('EXISTS', KEYS[2]) == 1 then return {'done', '0'} end
local h = redis.call('HMGET', KEYS[1], 'entry', 'attempt', 'cancel', 'state', 'consumer')
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
if attempt == 0 then attempt = 1 end
redis.call('HSET', KEYS[1], 'state', 'running', 'entry', ARGV[1], 'consumer', ARGV[2],
           'attempt', attempt, 'claimed_ms', ARGV[3])
redis.call('EXPIRE', KEYS[1], ARGV[4])
return {verdict, tostring(attempt)}
)lua";

const char* const kFinishScript = R"lua(
local h = redis.call('HMGET', KEYS[1], 'consumer', 'attempt', 'entry')
if h[3] and h[3] ~= ARGV[1] then return 'dup' end
if h[1] and (h[1] ~= ARGV[2] or h[2] ~= ARGV[3]) then return 'fenced' end
redis.call('SET', KEYS[2], ARGV[4], 'EX', ARGV[5])
redis.call('HSET', KEYS[1], 'state', 'done', 'entry', ARGV[1], 'consumer', ARGV[2], 'attempt', ARGV[3])
redis.call('EXPIRE', KEYS[1], ARGV[5])
redis.call('PUBLISH', KEYS[4], ARGV[6])
redis.call('XACK', KEYS[3], ARGV[7], ARGV[1])
redis.call('XDEL', KEYS[3], ARGV[1])
return 'ok'
)lua";

}  // namespace sandpool
