-- deposit.lua: buffer the processed result (or failure) of one sequence number and
-- say whether a sender must be started for the destination.
--
-- KEYS[1]  <prefix>:reseq:{<d>}:sent     string  last sequence number sent or skipped
-- KEYS[2]  <prefix>:reseq:{<d>}:pending  hash    seq -> arrival JSON (not yet sent/skipped)
-- KEYS[3]  <prefix>:reseq:{<d>}:buffer   hash    seq -> entry JSON (processed, not yet sent)
-- KEYS[4]  <prefix>:reseq:{<d>}:sender   string  token of the running sender (TTL)
-- KEYS[5]  <prefix>:reseq:{<d>}:wake     string  due ms of the booked sender run (TTL)
-- KEYS[6]  <prefix>:reseq:{<d>}:stats    hash    counters: sent, skipped, late
-- ARGV[1]  seq
-- ARGV[2]  entry JSON
-- ARGV[3]  '1': count a late entry (a processing result); '0': a repeat hand-over
--
-- Returns 'late'   the seq was already sent or skipped: the entry is dropped (counted);
--         'kick'   no sender runs and there is work for one: start a sender now;
--         'queued' buffered; the running or scheduled sender will take it.
-- A second deposit of one seq (a redelivered task) keeps the first entry (HSETNX).
-- A counter another program overwrote (not an integer, or the hash not a hash) starts
-- again from this call or is left alone: a statistic never stops a send.
local function count(key, field, by)
  local done = redis.pcall('HINCRBY', key, field, by)
  if type(done) == 'table' and done.err then redis.pcall('HSET', key, field, by) end
end
local seq = tonumber(ARGV[1])
local sent = tonumber(redis.call('GET', KEYS[1]) or '0')
if not sent then  -- not recur's value: say which key
  return redis.error_reply('key ' .. KEYS[1]
    .. ' holds no sequence number: another program wrote it')
end
if seq <= sent or redis.call('HEXISTS', KEYS[2], seq) == 0 then
  if ARGV[3] == '1' then
    count(KEYS[6], 'late', 1)
  end
  return 'late'
end
redis.call('HSETNX', KEYS[3], seq, ARGV[2])
if redis.call('EXISTS', KEYS[4]) == 1 then
  return 'queued'
end
if redis.call('HEXISTS', KEYS[3], sent + 1) == 1 then
  return 'kick'
end
-- The next one is missing: a sender must time the gap, unless a booked run is still due.
local now = redis.call('TIME')
local now_ms = tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000)
if tonumber(redis.call('GET', KEYS[5]) or '0') < now_ms then
  return 'kick'
end
return 'queued'
