-- A worker's reaper looks at user <u> whose wake time came (keys: see
-- lock_lib.lua): a lease that is still held moves the wake time to its
-- expiry; a free lock (the holder died, or a handover was never claimed) goes
-- to the first parked job, exactly as a release would.
--
-- ARGV: 1 user, 2 handover token, 3 lease ms, 4 gap timeout ms
-- Returns 0 or {1, job JSON, seq, epoch, fence} (see hand_over).
local user, handover, ttl, gap_ms = ARGV[1], ARGV[2], tonumber(ARGV[3]), tonumber(ARGV[4])
local now = now_ms()
local pttl = redis.call('PTTL', KEYS[1])
if pttl > 0 then
  redis.call('ZADD', KEYS[5], now + pttl, user)
  return 0
end
return hand_over(user, handover, ttl, gap_ms, now)
