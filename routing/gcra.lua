-- GCRA with reserve-on-refusal: one limited key's rate limit. Its users:
-- tasks/flow/limiter.py (@rate_limit and a bucket file's rate, one key per limited
-- key) and routing/reseq/pace.py (a resequencer destination's rate=, one key per
-- destination, the job being the sequence number). Loaded once: routing/redis_client.py.
--
-- KEYS[1]  the limited key's hash, PX-expiring once the key is idle
--            (<prefix>:rate:{<key>}, or <prefix>:reseq:{<d>}:rate):
--            plan   theoretical arrival time (ms) of the key's next slot: every
--                   allowed or reserved job moves it by one interval
--            run    theoretical arrival time (ms) of the runs that really started:
--                   every run must conform to it too (late copies cannot bunch up)
--            r:<job>  the slot (ms) reserved for a job that must wait for it (refused
--                   on a delivery, or slotted when it was published); consumed when it runs
--            g:<job>  a job whose slot was "now" when it was published (its plan step
--                   is taken): it runs on arrival if the real runs allow it
--            late   the last slot given to a copy that missed its turn (came after its
--                   slot and after the key's next start): the next such copy goes after it
-- KEYS[3]  optional: the key's line, a sorted set of the placed jobs that have not
--            started, scored by placement (the key's plan after it: strictly rising),
--            so one key's jobs start in the order they were placed whatever way their
--            copies came back (@rate_limit passes it; a destination's sends are
--            ordered by its resequencer and pass none)
-- KEYS[2]  counters hash (<prefix>:rate:stats, or the destination's stats hash):
--            deferred:<ARGV[4]> (jobs refused and given a slot, ever), waiting:<ARGV[4]>
--            (jobs holding a reserved slot now); in mode 'deliver' also busy:<ARGV[4]>
--            (deliveries that did not start their job, ever); in mode 'submit'
--            slotted:<ARGV[4]> (jobs given a later slot when published, ever)
-- ARGV[1]  emission interval (ms, may be fractional)
-- ARGV[2]  burst (jobs that may start at once)
-- ARGV[3]  job identity (its job key)
-- ARGV[4]  the counters' label (a bucket; 'rate' for a destination)
-- ARGV[5]  mode: '' (a start now, or a slot), 'deliver' (the same, counting busy
--          returns), 'submit' (the job is being published: take its place in the
--          key's plan, a slot now or later, without starting it)
-- ARGV[6]  in mode 'deliver': ms within which the caller waits for its slot in place
--          (such a refusal is not a busy return)
-- ARGV[7]  ms of lateness forgiven: a reserved job that starts at most this long after
--          its slot (its copy came back through the broker a moment late) moves the
--          key's real-runs time as if it had started at its slot, so the key keeps its
--          cadence instead of losing that much per job. The caller keeps it small
--          enough that a 1-second window still sees at most rate + burst starts
--          (tasks/flow/limiter.py forgiven_lateness); at most half an interval here
-- ARGV[8]  with KEYS[3]: ms after its slot a line's first job may keep the jobs behind it
--          waiting; a first job that late is taken out of the line (its copy was lost
--          or is far behind a backlog: it starts when it comes, out of order)
--
-- Returns {allowed (1/0), wait ms until its slot, 1 when this call made a new
-- reservation}. Time is Redis' own (TIME): every worker shares one clock.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + tonumber(t[2]) / 1000
local step, burst = tonumber(ARGV[1]), tonumber(ARGV[2])
local tol = step * burst
local mode = ARGV[5] or ''
local field, granted_field = 'r:' .. ARGV[3], 'g:' .. ARGV[3]
local h = redis.call('HMGET', KEYS[1], 'plan', 'run', field, granted_field, 'late')
local plan, run, slot = tonumber(h[1]) or 0, tonumber(h[2]) or 0, tonumber(h[3])
local granted, late = h[4], tonumber(h[5]) or 0

local line = KEYS[3]
-- A start leaves the line's expiry alone (``started``): it only shrinks the line, whose
-- expiry its last placement set; the hash's is moved on.
local function keep(horizon, started)
  local ttl = math.ceil(math.max(horizon - now, 0) + tol) + 60000
  redis.call('PEXPIRE', KEYS[1], ttl)
  if line and not started then redis.call('PEXPIRE', line, ttl) end
end

-- The slot (ms) of a placed job ahead of this one that has not started yet (this one
-- waits behind it; a job not in the line is behind any), else nil. A first job more
-- than ARGV[8] ms past its slot leaves the line (a few per call).
local function ahead(placed)
  local grace = tonumber(ARGV[8]) or 0
  for _ = 1, 8 do
    local head = redis.call('ZRANGE', line, 0, 0)[1]
    if head == nil or head == ARGV[3] then return nil end
    if placed and not redis.call('ZSCORE', line, ARGV[3]) then return nil end
    local hs = redis.call('HMGET', KEYS[1], 'r:' .. head, 'g:' .. head)
    local at = tonumber(hs[1]) or tonumber(hs[2])
    if at and now - at <= grace then return at end
    redis.call('ZREM', line, head)
  end
  return nil
end

local function wait_of(at)
  return math.max(1, math.ceil(at - now))
end

-- A counter another program overwrote (not an integer, or the hash not a hash) starts
-- again from this call or is left alone: a statistic never stops a job (every key of
-- the bucket shares the counters hash).
local function count(kind, by)
  local field = kind .. ':' .. ARGV[4]
  local done = redis.pcall('HINCRBY', KEYS[2], field, by)
  if type(done) == 'table' and done.err then redis.pcall('HSET', KEYS[2], field, by) end
end

local function refused(answer)
  if mode == 'deliver' and answer[2] > (tonumber(ARGV[6]) or 0) then count('busy', 1) end
  return answer
end

local plan_next = math.max(plan, now) + step
if mode == 'submit' then
  if slot then return {0, wait_of(slot), 0} end  -- published again: its place is kept
  if granted then return {1, 0, 0} end
  if line then redis.call('ZADD', line, plan_next, ARGV[3]) end
  if plan_next - now <= tol then  -- its place is now: it runs on arrival
    redis.call('HSET', KEYS[1], 'plan', plan_next, granted_field, now)
    keep(plan_next)
    return {1, 0, 0}
  end
  local at = plan_next - tol
  redis.call('HSET', KEYS[1], 'plan', plan_next, field, at)
  count('waiting', 1)
  count('slotted', 1)
  keep(plan_next)
  return {0, wait_of(at), 1}
end

if slot and now < slot then  -- an early copy: come back at the slot, reserve nothing new
  return refused({0, wait_of(slot), 0})
end
local run_next = math.max(run, now) + step
local first = (slot or granted) and line and ahead(true)
if first then
  -- A job of its key placed before it has not started (its copy is behind this one):
  -- back as many steps after that job's slot (or the key's next start) as it has jobs
  -- ahead of it, keeping its place in the line (the key's plan does not move: it starts
  -- only through the checks below). Those waiting come back one by one, in order.
  local ahead_of = redis.call('ZRANK', line, ARGV[3]) or 1
  local at = math.max(first, run_next - tol, now) + ahead_of * step
  if granted then
    redis.call('HDEL', KEYS[1], granted_field)
    count('deferred', 1)
    count('waiting', 1)
  end
  redis.call('HSET', KEYS[1], field, at)
  keep(math.max(plan, at + tol))
  return refused({0, wait_of(at), granted and 1 or 0})
end
if slot or granted then  -- its slot has come: it runs if the real runs allow it
  if run_next - now <= tol then
    local charged = now
    if slot and now - slot <= math.min(tonumber(ARGV[7]) or 0, step / 2) then
      charged = slot  -- back a moment late: its lateness does not push the key's next job
    end
    run_next = math.max(run, charged) + step
    redis.call('HSET', KEYS[1], 'run', run_next)
    redis.call('HDEL', KEYS[1], field, granted_field)
    if line then redis.call('ZREM', line, ARGV[3]) end
    if slot then count('waiting', -1) end
    keep(math.max(plan, run_next), true)
    return {1, 0, 0}
  end
  -- It missed its turn (the key started a job less than an interval ago): the next
  -- slot after the real runs, and after those given to copies that missed theirs
  -- before it, so the copies that come late together come back one by one, in order.
  local at = math.max(run_next - tol, late + step)
  plan = math.max(plan, at + tol)
  redis.call('HSET', KEYS[1], field, at, 'late', at, 'plan', plan)
  keep(plan)
  if granted then  -- it waits now: a reservation like a refused job's
    redis.call('HDEL', KEYS[1], granted_field)
    count('deferred', 1)
    count('waiting', 1)
    return refused({0, wait_of(at), 1})
  end
  return refused({0, wait_of(at), 0})
end
-- A job placed nowhere yet (dispatched from the store, a retry, Redis down when it was
-- published) starts only when no placed job waits: else it takes its place behind them.
if not (line and ahead(false)) and plan_next - now <= tol and run_next - now <= tol then
  redis.call('HSET', KEYS[1], 'plan', plan_next, 'run', run_next)
  keep(plan_next, true)
  return {1, 0, 0}
end
local due = math.max(plan_next, run_next)
local at = due - tol  -- the slot it takes, behind every job of its key refused before it
redis.call('HSET', KEYS[1], 'plan', due, field, at)
if line then redis.call('ZADD', line, due, ARGV[3]) end
count('deferred', 1)
count('waiting', 1)
keep(due)
return refused({0, wait_of(at), 1})
