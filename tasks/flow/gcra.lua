-- GCRA with reserve-on-refusal: one limited key's rate limit (tasks/flow/limiter.py).
--
-- KEYS[1]  <prefix>:rate:{<key>}  hash, PX-expiring once the key is idle:
--            plan   theoretical arrival time (ms) of the key's next slot: every
--                   allowed or reserved job moves it by one interval
--            run    theoretical arrival time (ms) of the runs that really started:
--                   every run must conform to it too (late copies cannot bunch up)
--            r:<job>  the slot (ms) reserved for a refused job; consumed when it runs
-- KEYS[2]  <prefix>:rate:stats  hash: deferred:<bucket> (refusals, ever),
--            waiting:<bucket> (jobs holding a reservation now)
-- ARGV[1]  emission interval (ms, may be fractional)
-- ARGV[2]  burst (jobs that may start at once)
-- ARGV[3]  job identity (its job key)
-- ARGV[4]  bucket (for the counters)
--
-- Returns {allowed (1/0), wait ms until its slot, 1 when this call made a new
-- reservation}. Time is Redis' own (TIME): every worker shares one clock.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + tonumber(t[2]) / 1000
local step, burst = tonumber(ARGV[1]), tonumber(ARGV[2])
local tol = step * burst
local field = 'r:' .. ARGV[3]
local h = redis.call('HMGET', KEYS[1], 'plan', 'run', field)
local plan, run, slot = tonumber(h[1]) or 0, tonumber(h[2]) or 0, tonumber(h[3])

local function keep(horizon)
  redis.call('PEXPIRE', KEYS[1], math.ceil(math.max(horizon - now, 0) + tol) + 60000)
end

local function wait_of(at)
  return math.max(1, math.ceil(at - now))
end

if slot and now < slot then  -- an early copy: come back at the slot, reserve nothing new
  return {0, wait_of(slot), 0}
end
local run_next = math.max(run, now) + step
if slot then  -- its reserved slot has come: it runs if the real runs allow it
  if run_next - now <= tol then
    redis.call('HSET', KEYS[1], 'run', run_next)
    redis.call('HDEL', KEYS[1], field)
    redis.call('HINCRBY', KEYS[2], 'waiting:' .. ARGV[4], -1)
    keep(math.max(plan, run_next))
    return {1, 0, 0}
  end
  local at = run_next - tol  -- late runs of the key got ahead of it: just after them
  plan = math.max(plan, run_next)
  redis.call('HSET', KEYS[1], field, at, 'plan', plan)
  keep(plan)
  return {0, wait_of(at), 0}
end
local plan_next = math.max(plan, now) + step
if plan_next - now <= tol and run_next - now <= tol then
  redis.call('HSET', KEYS[1], 'plan', plan_next, 'run', run_next)
  keep(plan_next)
  return {1, 0, 0}
end
local due = math.max(plan_next, run_next)
local at = due - tol  -- the slot it takes, behind every job of its key refused before it
redis.call('HSET', KEYS[1], 'plan', due, field, at)
redis.call('HINCRBY', KEYS[2], 'deferred:' .. ARGV[4], 1)
redis.call('HINCRBY', KEYS[2], 'waiting:' .. ARGV[4], 1)
keep(due)
return {0, wait_of(at), 1}
