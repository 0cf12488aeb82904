-- intake.lua: assign arrival sequence numbers to n messages of one destination,
-- atomically, unless that would hold more unsent messages than the capacity.
--
-- KEYS[1]  <prefix>:reseq:{<d>}:seq      string  last sequence number assigned
-- KEYS[2]  <prefix>:reseq:{<d>}:pending  hash    seq -> {"t": arrival ms, "id": message id}
--                                                 (assigned, not yet sent or skipped)
-- ARGV[1]  capacity (largest HLEN pending allowed)
-- ARGV[2..n+1]  the messages' ids, in arrival order
--
-- Returns {first seq, pending before}; first seq is 0 when refused (full).
-- Arrival time is Redis's clock, the one the gap timeout is measured against.
local n = #ARGV - 1
local held = redis.call('HLEN', KEYS[2])
if held + n > tonumber(ARGV[1]) then
  return {0, held}
end
local now = redis.call('TIME')
local now_ms = tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000)
local last = redis.pcall('INCRBY', KEYS[1], n)
if type(last) == 'table' then  -- out of memory, or not recur's value: say which key
  if string.find(last.err, 'OOM', 1, true) then return last end
  return redis.error_reply('key ' .. KEYS[1] .. ' holds no sequence number: another '
                           .. 'program wrote it (' .. last.err .. ')')
end
local first = last - n + 1
for i = 1, n do
  redis.call('HSET', KEYS[2], first + i - 1, cjson.encode({t = now_ms, id = ARGV[i + 1]}))
end
return {first, held}
