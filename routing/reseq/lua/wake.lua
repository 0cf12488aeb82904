-- wake.lua: book a delayed sender run for a destination, unless one is already booked
-- that runs no later. Whoever runs books the next one it needs, so one booking is
-- enough.
--
-- KEYS[1]  <prefix>:reseq:{<d>}:wake     string  due ms of the booked run (TTL: due + 10 s)
-- ARGV[1]  delay, ms
--
-- Returns the delay in ms to publish the run with, or -1 if a booked run covers it.
local now = redis.call('TIME')
local now_ms = tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000)
local due = now_ms + tonumber(ARGV[1])
local booked = tonumber(redis.call('GET', KEYS[1]) or '0')
if booked >= now_ms and booked <= due then
  return -1
end
redis.call('SET', KEYS[1], due, 'PX', tonumber(ARGV[1]) + 10000)
return tonumber(ARGV[1])
