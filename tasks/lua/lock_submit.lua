-- Give a job of user <u> its sequence number when it is published: jobs start
-- in this order (keys: see lock_lib.lua; uses KEYS[2] order and KEYS[6] counter).
--
-- ARGV: none. Returns {seq, epoch}.
local seq = redis.call('HINCRBY', KEYS[2], 'sub', 1)
local epoch = redis.call('HGET', KEYS[2], 'epoch')
if not epoch then
  epoch = tostring(redis.call('INCR', KEYS[6]))
  redis.call('HSET', KEYS[2], 'next', seq, 'epoch', epoch)
end
redis.call('PEXPIRE', KEYS[2], 86400000)
return {seq, epoch}
