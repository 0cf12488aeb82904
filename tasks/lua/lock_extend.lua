-- Extend user <u>'s lease if this token still holds it (the watchdog).
--
-- KEYS[1] <prefix>:lock:{<u>}:owner  string  token of the holder (see lock_lib.lua)
-- ARGV: 1 token, 2 lease ms
-- Returns 1 when extended, 0 when the token no longer holds the lock.
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 0
