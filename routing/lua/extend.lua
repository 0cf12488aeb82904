-- extend.lua: keep the sender lock, only if we still own it.
--
-- KEYS[1]  <prefix>:reseq:{<d>}:sender   string  token of the running sender (TTL)
-- ARGV[1]  sender token
-- ARGV[2]  new TTL, ms
--
-- Returns 1 if extended, 0 if the lock is someone else's or gone.
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 0
