-- acquire.lua: become a destination's one sender, with a short lease and a new fence.
--
-- KEYS[1]  <prefix>:reseq:{<d>}:sender   string  token of the running sender (lease TTL)
-- KEYS[2]  <prefix>:reseq:{<d>}:fence    string  fence of the latest lease (only grows)
-- ARGV[1]  sender token
-- ARGV[2]  lease, ms
--
-- Returns the new lease's fence (>= 1), or 0 if another sender holds the lease.
-- The fence goes out with every send of this lease (X-Recur-Fence), so a receiver can
-- refuse a late send of an earlier holder.
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', tonumber(ARGV[2])) then
  return redis.call('INCR', KEYS[2])
end
return 0
