-- outage.lua: record a try a destination held back (an outage), or the outage's end.
--
-- KEYS[1]  <prefix>:reseq:{<d>}:outage   hash    since (ms), last (ms), status, reason, tries,
--                                                 seq, kind: the current outage (TTL)
-- KEYS[2]  <prefix>:reseq:{<d>}:stats    hash    counters: ..., refused:<status>
-- ARGV[1]  'down' or 'up'
-- down:
-- ARGV[2]  status of the last answer ('0': no answer at all)
-- ARGV[3]  reason (one line)
-- ARGV[4]  the sequence number waiting
-- ARGV[5]  'refused' (not ready: 401, 3xx, ...) or 'unavailable' (5xx, timeout, ...)
-- ARGV[6]  tries this time
-- ARGV[7]  TTL, ms: the record expires unless a sender tries again within it
--
-- down returns 'new' (an outage starts with this try: log it once), 'changed' (still
-- out, with another status or kind) or 'same'. up returns {since ms, tries, status} of
-- the outage that ended, or an empty list when there was none (another sender ended it).
-- A counter another program overwrote (not an integer, or the hash not a hash) starts
-- again from this call or is left alone: a statistic never stops a send.
local function count(key, field, by)
  local done = redis.pcall('HINCRBY', key, field, by)
  if type(done) == 'table' and done.err then redis.pcall('HSET', key, field, by) end
end
local now = redis.call('TIME')
local now_ms = tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000)
if ARGV[1] == 'up' then
  local ended = redis.call('HMGET', KEYS[1], 'since', 'tries', 'status')
  if not ended[1] then
    return {}
  end
  redis.call('DEL', KEYS[1])
  return ended
end
local before = redis.call('HMGET', KEYS[1], 'status', 'kind')
redis.call('HSETNX', KEYS[1], 'since', now_ms)
redis.call('HSET', KEYS[1], 'last', now_ms, 'status', ARGV[2], 'reason', ARGV[3], 'seq', ARGV[4],
           'kind', ARGV[5])
count(KEYS[1], 'tries', tonumber(ARGV[6]))
redis.call('PEXPIRE', KEYS[1], tonumber(ARGV[7]))
if ARGV[2] ~= '0' then
  count(KEYS[2], 'refused:' .. ARGV[2], tonumber(ARGV[6]))
end
if not before[1] then
  return 'new'
end
if before[1] ~= ARGV[2] or before[2] ~= ARGV[5] then
  return 'changed'
end
return 'same'
