-- advance.lua: record that the next sequence number was sent (or skipped, or set aside
-- in the destination's dead letter), atomically, and only by the destination's one sender.
--
-- KEYS[1]  <prefix>:reseq:{<d>}:sender   string  token of the running sender (TTL)
-- KEYS[2]  <prefix>:reseq:{<d>}:sent     string  last sequence number sent or skipped
-- KEYS[3]  <prefix>:reseq:{<d>}:pending  hash    seq -> arrival JSON
-- KEYS[4]  <prefix>:reseq:{<d>}:buffer   hash    seq -> entry JSON
-- KEYS[5]  <prefix>:reseq:{<d>}:skipped  list    skip records (JSON), newest first, capped
-- KEYS[6]  <prefix>:reseq:{<d>}:stats    hash    counters: sent, skipped, late, dead,
--                                                 refused:<status>
-- ARGV[1]  sender token
-- ARGV[2]  seq (must be sent + 1)
-- ARGV[3]  'sent', 'skipped' or 'dead' (set aside: the dead letter was published first)
-- ARGV[4]  skip record JSON (for 'skipped')
-- ARGV[5]  skip records kept
-- ARGV[6]  '1': skip only if no entry arrived meanwhile (a gap timing out)
-- ARGV[7]  for 'dead': the destination's status ('' when it did not answer: a failed step)
--
-- Returns 'ok', 'not-owner' (the sender lost its lock: stop), 'out-of-step' (seq is
-- not the next one) or 'arrived' (the gap filled just now: send it instead).
-- A counter another program overwrote (not an integer, or the hash not a hash) starts
-- again from this call or is left alone: a statistic never stops a send.
local function count(key, field, by)
  local done = redis.pcall('HINCRBY', key, field, by)
  if type(done) == 'table' and done.err then redis.pcall('HSET', key, field, by) end
end
if redis.call('GET', KEYS[1]) ~= ARGV[1] then
  return 'not-owner'
end
local seq = tonumber(ARGV[2])
local sent = tonumber(redis.call('GET', KEYS[2]) or '0')
if not sent then  -- not recur's value: say which key
  return redis.error_reply('key ' .. KEYS[2]
    .. ' holds no sequence number: another program wrote it')
end
if seq ~= sent + 1 then
  return 'out-of-step'
end
if ARGV[6] == '1' and redis.call('HEXISTS', KEYS[4], seq) == 1 then
  return 'arrived'
end
redis.call('SET', KEYS[2], seq)
redis.call('HDEL', KEYS[3], seq)
redis.call('HDEL', KEYS[4], seq)
if ARGV[3] == 'skipped' then
  redis.call('LPUSH', KEYS[5], ARGV[4])
  redis.call('LTRIM', KEYS[5], 0, tonumber(ARGV[5]) - 1)
  count(KEYS[6], 'skipped', 1)
elseif ARGV[3] == 'dead' then
  count(KEYS[6], 'dead', 1)
  if ARGV[7] and ARGV[7] ~= '' then
    count(KEYS[6], 'refused:' .. ARGV[7], 1)
  end
else
  count(KEYS[6], 'sent', 1)
end
return 'ok'
