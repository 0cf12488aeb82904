-- release.lua: the sender lets go of its destination, unless there is work a new
-- sender would have to start for: the next sequence number became ready, or results
-- wait behind a gap that no booked run will time. Checking and releasing in one step
-- closes the race with deposit.lua: a deposit either sees the lock (and leaves the
-- work to this sender) or sees it gone (and starts a new sender if one is needed).
--
-- KEYS[1]  <prefix>:reseq:{<d>}:sender   string  token of the running sender (TTL)
-- KEYS[2]  <prefix>:reseq:{<d>}:sent     string  last sequence number sent or skipped
-- KEYS[3]  <prefix>:reseq:{<d>}:buffer   hash    seq -> entry JSON
-- KEYS[4]  <prefix>:reseq:{<d>}:wake     string  due ms of the booked sender run (TTL)
-- ARGV[1]  sender token
-- ARGV[2]  TTL, ms, when keeping the lock
-- ARGV[3]  '1': release whatever waits (the sender's turn is over, or it failed)
--
-- Returns 'released', 'more' (lock kept: look at the next one again) or 'not-owner'.
if redis.call('GET', KEYS[1]) ~= ARGV[1] then
  return 'not-owner'
end
if ARGV[3] ~= '1' then
  local sent = tonumber(redis.call('GET', KEYS[2]) or '0')
  if not sent then  -- not recur's value: say which key
    return redis.error_reply('key ' .. KEYS[2]
    .. ' holds no sequence number: another program wrote it')
  end
  local more = redis.call('HEXISTS', KEYS[3], sent + 1) == 1
  if not more and redis.call('HLEN', KEYS[3]) > 0 then
    local now = redis.call('TIME')
    local now_ms = tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000)
    more = tonumber(redis.call('GET', KEYS[4]) or '0') < now_ms
  end
  if more then
    redis.call('PEXPIRE', KEYS[1], ARGV[2])
    return 'more'
  end
end
redis.call('DEL', KEYS[1])
return 'released'
