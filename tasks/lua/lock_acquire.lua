-- Take user <u>'s lock for one job, or park the job (keys: see lock_lib.lua).
--
-- ARGV: 1 user, 2 token, 3 lease ms, 4 job's sequence number (0: none),
--       5 job's epoch, 6 job JSON, 7 handover token the job carries ('' if none),
--       8 gap timeout ms
-- Returns the string "<status> <seq> <fence> <epoch>" (one bulk string: an array
-- reply costs the client several times more to read); status 1 acquired, 0
-- parked (the lock is held, or an earlier job of the user has not started yet),
-- 2 duplicate (this sequence number already finished: a second copy of a
-- finished job); fence is 0 unless acquired.
-- A parked job is handed over by the release of the job before it, or by a
-- worker's reaper when the holder's lease expires: it never polls.
local user, token, ttl = ARGV[1], ARGV[2], tonumber(ARGV[3])
local seq, epoch, job, handover = tonumber(ARGV[4]), ARGV[5], ARGV[6], ARGV[7]
local gap_ms = tonumber(ARGV[8])

local order = redis.call('HMGET', KEYS[2], 'next', 'epoch', 'gapat')
if seq == 0 or order[2] ~= epoch then
  -- Not numbered in the current epoch (published with an eta, or numbered
  -- before the user's state was forgotten): it joins the end of the line.
  seq = redis.call('HINCRBY', KEYS[2], 'sub', 1)
  if order[2] then
    epoch = order[2]
  else
    epoch = tostring(redis.call('INCR', KEYS[6]))
    redis.call('HSET', KEYS[2], 'next', seq, 'epoch', epoch)
    order[1] = seq
  end
  touch_state()
end
local nxt = tonumber(order[1])

local function answer(status, fence)
  return string.format('%d %d %d %s', status, seq, fence, epoch)
end

if seq < nxt and redis.call('SISMEMBER', KEYS[4], seq) == 0 then
  count('duplicates')
  return answer(2, 0)
end

-- A parked job stays in parked while it runs: if its holder dies (a job run
-- by the releasing worker has no broker message), the reaper hands it over again.
local function take()
  if seq < nxt then redis.call('SREM', KEYS[4], seq) end
  if order[3] then redis.call('HDEL', KEYS[2], 'gapat') end
  return answer(1, redis.call('INCR', KEYS[6]))
end

local owner
if seq <= nxt then
  -- The job whose turn it is (the usual case): one call takes a free lock, or
  -- answers the token holding it.
  owner = redis.call('SET', KEYS[1], token, 'NX', 'PX', ttl, 'GET')
  if not owner then return take() end
else
  owner = redis.call('GET', KEYS[1])
end
if owner and not (handover ~= '' and owner == handover) then
  redis.call('ZADD', KEYS[3], seq, job)
  redis.call('ZADD', KEYS[5], 'LT', now_ms() + math.max(redis.call('PTTL', KEYS[1]), 0),
             user)
  count('busy')
  return answer(0, 0)
end
if seq > nxt then
  redis.call('ZADD', KEYS[3], seq, job)
  redis.call('ZADD', KEYS[5], 'LT', gap_deadline(now_ms(), gap_ms), user)
  count('early')
  return answer(0, 0)
end
-- The lock was reserved for this job by a handover: it claims it.
redis.call('SET', KEYS[1], token, 'PX', ttl)
return take()
