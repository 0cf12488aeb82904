-- extend_lease.lua: keep a lease, only if we still own it. The one copy, run
-- through routing/redis_client.py by the user lock's watchdog (KEYS are then the
-- lock's keys in lock.lua's order: only the first is read) and by the
-- resequencer's sender heartbeat.
--
-- KEYS[1]  <prefix>:lock:{<u>}:owner or <prefix>:reseq:{<d>}:sender
--                             string  token of the holder (TTL = the lease)
-- ARGV[1]  holder token
-- ARGV[2]  new TTL, ms
--
-- Returns 1 if extended, 0 if the lock is someone else's or gone.
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 0
