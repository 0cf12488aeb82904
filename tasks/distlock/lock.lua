-- The per-user lock's Redis side. store.py loads this file once per entry
-- point, with "return <entry>()" appended: submit, acquire, release, wake,
-- published; the watchdog's extend is routing/extend_lease.lua (the one copy, shared
-- with the resequencer's sender), called with these KEYS and ARGV 1 token, 2 lease ms.
-- Every read and write of a user's line is one of these atomic calls.
--
-- Keys (config/keys.py), for user <u>:
--   KEYS[1] <prefix>:lock:{<u>}:owner    string  token of the holder, PX = lease
--   KEYS[2] <prefix>:lock:{<u>}:mark     hash    started  highest number that started
--                                                done     highest number that finished
--                                                gapat    ms when parked jobs stop waiting
--                                                         for a missing earlier one
--   KEYS[3] <prefix>:lock:{<u>}:wait     zset    numbers given out, not finished yet
--   KEYS[4] <prefix>:lock:{<u>}:parked   zset    parked job JSON -> number
--   KEYS[5] <prefix>:lock:{<u>}:skipped  set     numbers passed over (never to run)
--   KEYS[6] <prefix>:lock:{<u>}:ids      hash    task id -> number, for jobs numbered
--                                                on arrival (eta, unnumbered)
--   KEYS[7] <prefix>:lock:wake           zset    user -> ms when to look at it again
--   KEYS[8] <prefix>:lock:counter        string  ONE global counter: job numbers and
--                                                fencing tokens (never reused)
--   KEYS[9] <prefix>:lock:stats          hash    event counters
--
-- The rule: a job numbered s may start only if s > done, s >= started and s
-- is the lowest number in wait. So a finished job never runs again and no job
-- starts after a later job of its user started. mark, wait, skipped and ids
-- live `keep` ms after the user's last call (the wait budget plus a margin,
-- set by store.py): every copy of a job is older than the budget by the time
-- they are gone, and such a copy is refused (status 4), never run. parked has
-- no expiry: it holds jobs whose messages were acknowledged.
-- Times come from Redis (TIME), except a job's submission time (ARGV since).
--
-- Bounds: a user's line (wait) holds at most `cap` + 1 numbers given at submit
-- (RECUR_LOCK_MAX_PARKED waiting behind one running; submit refuses more) and
-- parked at most `cap` jobs (a job that would park beyond it is refused with
-- status 6 and waits in the broker instead). A number above the counter was
-- never given out: status 5.

local MAX_SKIP = 1000  -- at most this many missing numbers remembered per gap

local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

-- An event counter. One another program overwrote (not an integer, at the 64-bit
-- limit, or stats not a hash) starts again from this event or is left alone: a
-- statistic never stops a job (a failed write here would fail every user's calls).
local function count(event, n)
  local done = redis.pcall('HINCRBY', KEYS[9], event, n or 1)
  if type(done) == 'table' and done.err then redis.pcall('HSET', KEYS[9], event, n or 1) end
end

-- Keep the user's line (mark, wait) for `keep` ms from now; skipped and ids get
-- the same lifetime when they are written.
local function keep(keep_ms)
  redis.call('PEXPIRE', KEYS[2], keep_ms)
  redis.call('PEXPIRE', KEYS[3], keep_ms)
end

-- The lock is held without an expiry (PERSIST, or a key another program wrote): a
-- holder that crashed would keep it forever. It gets one lease, as if just taken: a
-- live holder's watchdog extends it, a dead one's lapses. Returns the lease (ms).
local function lease(ttl)
  redis.call('PEXPIRE', KEYS[1], ttl)
  count('lease_restored')
  return ttl
end

local function marks()
  local m = redis.call('HMGET', KEYS[2], 'started', 'done', 'gapat')
  return tonumber(m[1] or 0), tonumber(m[2] or 0), m[1] ~= false, m[3]
end

-- The lowest number not finished; `seq` joins wait first if it is not there
-- (its record expired or was lost with a Redis that restarted empty).
local function first_waiting(seq)
  local head = redis.call('ZRANGE', KEYS[3], 0, 0)
  local first = tonumber(head[1])
  if first == nil or first > seq then
    redis.call('ZADD', KEYS[3], seq, seq)
    return seq
  end
  return first
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

-- Give the free lock to the first parked job whose turn has come. With `take`
-- ('' = no) the lock is taken for that token now (the caller runs the job);
-- otherwise the lock stays free and the caller publishes the job, whose copy
-- takes it on arrival. The user is looked at again after one lease (ttl), in
-- case the caller dies before its publish is confirmed; `published` moves that
-- to gap_ms once the copy is in the broker, in case it never comes.
-- Returns 0 or {1, job JSON, seq, fence (0 if not taken)}.
local function hand_over(user, take, ttl, gap_ms, now)
  local head, seq
  while true do
    head = redis.call('ZRANGE', KEYS[4], 0, 0, 'WITHSCORES')
    if #head == 0 then
      redis.call('ZREM', KEYS[7], user)
      return 0
    end
    seq = tonumber(head[2])
    local started, done = marks()
    if seq >= started and seq > done then break end
    redis.call('ZREM', KEYS[4], head[1])  -- another copy of it has run since it parked
    count('duplicates')
  end
  local first = first_waiting(seq)
  now = now or now_ms()
  if first < seq then
    local gapat = gap_deadline(now, gap_ms)
    if now < gapat then
      redis.call('ZADD', KEYS[7], gapat, user)
      return 0
    end
    local missing = redis.call('ZRANGEBYSCORE', KEYS[3], '-inf', '(' .. seq)
    for i = 1, math.min(#missing, MAX_SKIP) do redis.call('SADD', KEYS[5], missing[i]) end
    redis.call('PEXPIRE', KEYS[5], redis.call('PTTL', KEYS[2]))
    redis.call('ZREMRANGEBYSCORE', KEYS[3], '-inf', '(' .. seq)
    count('gap_skips', #missing)
  end
  redis.call('HDEL', KEYS[2], 'gapat')
  count('handovers')
  if take == '' then
    redis.call('ZADD', KEYS[7], now + ttl, user)
    count('published')
    return {1, head[1], seq, 0}
  end
  redis.call('SET', KEYS[1], take, 'PX', ttl)
  redis.call('HSET', KEYS[2], 'started', seq)
  redis.call('ZADD', KEYS[7], now + ttl, user)
  return {1, head[1], seq, redis.call('INCR', KEYS[8])}
end

-- Number a job when it is published. ARGV: 1 keep ms, 2 cap (jobs that may wait
-- behind the one running, per user). Returns the number, or 0 when the line is full.
local function submit()
  if redis.call('ZCARD', KEYS[3]) > tonumber(ARGV[2]) then
    count('line_full')
    return 0
  end
  local seq = redis.call('INCR', KEYS[8])
  redis.call('ZADD', KEYS[3], seq, seq)
  redis.call('HSETNX', KEYS[2], 'started', 0)
  keep(tonumber(ARGV[1]))
  return seq
end

-- Take the lock for one job, or park it, or refuse it.
-- ARGV: 1 user, 2 token, 3 lease ms, 4 job's number (0: none), 5 task id,
--       6 job JSON, 7 gap ms, 8 keep ms, 9 submitted at (ms, 0: unknown),
--       10 wait budget ms, 11 cap (parked jobs per user)
-- Returns "<status> <seq> <fence>": 1 acquired, 0 parked, 2 duplicate (it
-- finished, or a copy of it ran), 3 passed over (a gap timeout skipped it:
-- later jobs have started), 4 too old (the user's memory is gone and the job
-- is past the wait budget), 5 never numbered (above the counter: forged),
-- 6 not parked (the user has `cap` parked jobs: it waits in the broker). A park
-- that gave one lease to an owner key of another type adds " <its type>".
local function acquire()
  local user, token, ttl, seq = ARGV[1], ARGV[2], tonumber(ARGV[3]), tonumber(ARGV[4])
  local started, done, known, gapat = marks()
  local since = tonumber(ARGV[9])
  local function too_old()  -- TIME is read only when it matters
    return since > 0 and now_ms() - since > tonumber(ARGV[10])
  end
  if seq == 0 then  -- numbered on arrival: once, by task id
    seq = tonumber(redis.call('HGET', KEYS[6], ARGV[5]) or 0)
    if seq == 0 then
      if too_old() then  -- its number may have been forgotten: never a new one
        count('too_old')
        return '4 0 0'
      end
      seq = redis.call('INCR', KEYS[8])
      redis.call('HSET', KEYS[6], ARGV[5], seq)
      redis.call('PEXPIRE', KEYS[6], tonumber(ARGV[8]))
      redis.call('ZADD', KEYS[3], seq, seq)
      known = false  -- refresh the line's lifetime below
    end
  elseif seq > tonumber(redis.call('GET', KEYS[8]) or '0') then  -- never given out ...
    if redis.call('EXISTS', KEYS[8]) == 1 or seq % 1 ~= 0 or seq >= 2^53 then
      count('forged')
      return '5 ' .. ARGV[4] .. ' 0'  -- as given: a huge number is no Lua integer
    end
    -- ... unless Redis lost every number (restarted without AOF): the job's number was
    -- given out before; the counter resumes above it, so later numbers stay unique.
    redis.call('SET', KEYS[8], seq)
    count('counter_restored')
    if not known and too_old() then
      count('too_old')
      return '4 ' .. seq .. ' 0'
    end
  elseif not known and too_old() then  -- the user's line is gone: it cannot be placed
    count('too_old')
    return '4 ' .. seq .. ' 0'
  end
  if not known then
    redis.call('HSETNX', KEYS[2], 'started', 0)
    keep(tonumber(ARGV[8]))
  end
  if seq < started or seq <= done then
    if redis.call('SISMEMBER', KEYS[5], seq) == 1 then
      count('passed_over')
      return '3 ' .. seq .. ' 0'
    end
    count('duplicates')
    return '2 ' .. seq .. ' 0'
  end
  local foreign = nil
  if first_waiting(seq) == seq then
    local owner = redis.pcall('SET', KEYS[1], token, 'NX', 'PX', ttl, 'GET')
    if type(owner) == 'table' and owner.err then
      if not string.find(owner.err, 'WRONGTYPE', 1, true) then return owner end
      -- Another program's key of another type: held by it (parked below, never
      -- overwritten or deleted); without an expiry it gets one lease, as a string would.
      foreign = redis.call('TYPE', KEYS[1]).ok
    elseif not owner then
      redis.call('HSET', KEYS[2], 'started', seq)
      if gapat then redis.call('HDEL', KEYS[2], 'gapat') end
      -- A user with parked jobs has a wake entry: bring it to this lease's end.
      if redis.call('ZSCORE', KEYS[7], user) then
        redis.call('ZADD', KEYS[7], 'LT', now_ms() + ttl, user)
      end
      return '1 ' .. seq .. ' ' .. redis.call('INCR', KEYS[8])
    end
  end
  -- Parked: busy (the lock is held: look again when its lease ends) or early (an
  -- earlier job has not come back yet: a gap, which times out). Not beyond the cap,
  -- unless this very job is parked already (a second copy).
  if redis.call('ZCARD', KEYS[4]) >= tonumber(ARGV[11])
      and not redis.call('ZSCORE', KEYS[4], ARGV[6]) then
    count('park_full')
    return '6 ' .. seq .. ' 0'
  end
  local pttl, now = redis.call('PTTL', KEYS[1]), now_ms()
  local restored = ''
  if pttl == -1 then
    pttl = lease(ttl)
    if foreign then restored = ' ' .. foreign end  -- store.py names the key once
  end
  local deadline
  if pttl > 0 then
    count('busy')
    deadline = now + pttl
  else
    count('early')
    deadline = gap_deadline(now, tonumber(ARGV[7]))
  end
  redis.call('ZADD', KEYS[4], seq, ARGV[6])
  redis.call('ZADD', KEYS[7], 'LT', deadline, user)
  return '0 ' .. seq .. ' 0' .. restored
end

-- Release after a job and hand the lock to the next parked job.
-- ARGV: 1 user, 2 token, 3 job's number, 4 outcome: 'done', 'failed' (it
--       goes to the dead-letter queue; a replay is a new job), 'retry' (Celery
--       publishes it again: it keeps its place), 'again' (it stays parked and is
--       handed over again), 5 take token ('' = hand over through the broker),
--       6 lease ms, 7 gap ms, 8 keep ms, 9 task id
-- Returns -1 when another token holds the lock (nothing is touched), else
-- hand_over's answer. An expired lease that nobody took since still records
-- the outcome, so the user does not wait for a job that has finished.
local function release()
  local user, token, seq, outcome = ARGV[1], ARGV[2], tonumber(ARGV[3]), ARGV[4]
  local owner = redis.call('GET', KEYS[1])
  if owner and owner ~= token then
    count('refused')
    return -1
  end
  if owner then redis.call('DEL', KEYS[1]) else count('expired') end
  if outcome == 'done' or outcome == 'failed' then
    local _, done = marks()
    if seq > done then redis.call('HSET', KEYS[2], 'done', seq) end
    redis.call('ZREM', KEYS[3], seq)
    if outcome == 'failed' then redis.call('HDEL', KEYS[6], ARGV[9]) end
  end
  keep(tonumber(ARGV[8]))
  if redis.call('EXISTS', KEYS[4]) == 0 then return 0 end  -- nobody waits (most jobs)
  if outcome ~= 'again' then redis.call('ZREMRANGEBYSCORE', KEYS[4], seq, seq) end
  return hand_over(user, ARGV[5], tonumber(ARGV[6]), tonumber(ARGV[7]), nil)
end

-- A reaper looks at a user whose wake time came: a held lease moves the wake
-- time to its expiry; a free lock goes to the first parked job, through the
-- broker. ARGV: 1 user, 2 lease ms, 3 gap ms. Returns hand_over's answer.
local function wake()
  local now = now_ms()
  local pttl = redis.call('PTTL', KEYS[1])
  if pttl == -1 then pttl = lease(tonumber(ARGV[2])) end
  if pttl > 0 then
    redis.call('ZADD', KEYS[7], now + pttl, ARGV[1])
    return 0
  end
  return hand_over(ARGV[1], '', tonumber(ARGV[2]), tonumber(ARGV[3]), now)
end

-- A published handover's copy is in the broker (the publish was confirmed):
-- look at the user again after gap_ms instead of one lease, unless its copy
-- already took the lock or ran. ARGV: 1 user, 2 job's number, 3 gap ms.
-- Returns 1 when the wake time moved.
local function published()
  if redis.call('EXISTS', KEYS[1]) == 1 then return 0 end
  local head = redis.call('ZRANGE', KEYS[4], 0, 0, 'WITHSCORES')
  if #head == 0 or tonumber(head[2]) ~= tonumber(ARGV[2]) then return 0 end
  redis.call('ZADD', KEYS[7], 'XX', now_ms() + tonumber(ARGV[3]), ARGV[1])
  return 1
end
