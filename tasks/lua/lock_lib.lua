-- Shared part of the per-user lock scripts (tasks/distlock/store.py puts it
-- in front of acquire.lua, release.lua and wake.lua before loading them).
--
-- Key layout (config/keys.py), for user <u>:
--   KEYS[1] <prefix>:lock:{<u>}:owner    string  token of the holder, PX = lease
--   KEYS[2] <prefix>:lock:{<u>}:order    hash    sub   last sequence number given out
--                                                 next  lowest sequence number not finished
--                                                 epoch id of this run of numbers
--                                                 gapat ms when parked jobs stop waiting
--                                                       for a missing earlier one
--   KEYS[3] <prefix>:lock:{<u>}:parked   zset    job JSON -> sequence number
--   KEYS[4] <prefix>:lock:{<u>}:skipped  set     numbers passed over that may still come
--   KEYS[5] <prefix>:lock:wake           zset    user -> ms when to look at it again
--   KEYS[6] <prefix>:lock:counter        string  fencing tokens and epochs
--   KEYS[7] <prefix>:lock:stats          hash    event counters
-- A user's keys exist only while it has jobs in flight (order, skipped) or
-- parked (parked, wake): memory follows busy users, not the population.
-- Times come from Redis (TIME), so workers' clocks do not matter.

local STATE_TTL_MS = 86400000  -- a forgotten user's order state goes after a day
local MAX_SKIP = 1000          -- at most this many missing numbers remembered per gap

local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

local function count(event, n)
  redis.call('HINCRBY', KEYS[7], event, n or 1)
end

local function touch_state()
  redis.call('PEXPIRE', KEYS[2], STATE_TTL_MS)
end

local function skip(seq)
  redis.call('SADD', KEYS[4], seq)
  redis.call('PEXPIRE', KEYS[4], STATE_TTL_MS)
end

-- The deadline for parked jobs that wait on a missing earlier job.
local function gap_deadline(now, gap_ms)
  local gapat = tonumber(redis.call('HGET', KEYS[2], 'gapat') or 0)
  if gapat == 0 then
    gapat = now + gap_ms
    redis.call('HSET', KEYS[2], 'gapat', gapat)
  end
  return gapat
end

-- Give the free lock to the user's first parked job if its turn has come:
-- reserve the owner key for the `handover` token and return
-- {1, job JSON, seq, epoch, fence}; otherwise 0. The caller either runs the
-- job itself, holding the lock with the handover token and this fence, or
-- publishes it with the token, and the job takes the lock when it arrives.
-- With nothing parked and every number given out finished, forget the user.
-- `now` may be nil: it is read from Redis only when needed.
local function hand_over(user, handover, ttl, gap_ms, now)
  local head = redis.call('ZRANGE', KEYS[3], 0, 0, 'WITHSCORES')
  if #head == 0 then
    redis.call('ZREM', KEYS[5], user)
    local order = redis.call('HMGET', KEYS[2], 'next', 'sub')
    if order[1] and order[2] and tonumber(order[1]) > tonumber(order[2]) then
      redis.call('DEL', KEYS[2], KEYS[4])
    end
    return 0
  end
  local seq = tonumber(head[2])
  local nxt = tonumber(redis.call('HGET', KEYS[2], 'next') or seq)
  now = now or now_ms()
  if seq > nxt then
    local gapat = gap_deadline(now, gap_ms)
    if now < gapat then
      redis.call('ZADD', KEYS[5], gapat, user)
      return 0
    end
    for missing = nxt, math.min(seq - 1, nxt + MAX_SKIP - 1) do skip(missing) end
    redis.call('HSET', KEYS[2], 'next', seq)
    count('gap_skips', seq - nxt)
  elseif seq < nxt then
    redis.call('SREM', KEYS[4], seq)  -- a late job: it runs now
  end
  redis.call('HDEL', KEYS[2], 'gapat')
  redis.call('SET', KEYS[1], handover, 'PX', ttl)
  redis.call('ZADD', KEYS[5], now + ttl, user)
  count('handovers')
  return {1, head[1], seq, redis.call('HGET', KEYS[2], 'epoch') or '0',
          redis.call('INCR', KEYS[6])}
end
