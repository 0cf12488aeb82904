-- Release user <u>'s lock after a job and hand it to the next parked job
-- (keys: see lock_lib.lua).
--
-- ARGV: 1 user, 2 token, 3 job's sequence number, 4 outcome: 'done', 'failed'
--       (dead-lettered; it may be replayed, so its number is kept in skipped),
--       'retry' (Celery publishes it again: later jobs keep waiting for it) or
--       'again' (it stays parked and is handed over again, to run once more),
--       5 handover token, 6 lease ms, 7 gap timeout ms
-- Returns -1 when another token holds the lock (nothing is touched), else
-- hand_over's answer: {1, job JSON, seq, epoch, fence} (see hand_over), or 0.
-- An expired lease that nobody took since (owner key gone) still records the
-- job's outcome, so its user does not wait for a job that has finished.
local user, token, seq, outcome = ARGV[1], ARGV[2], tonumber(ARGV[3]), ARGV[4]
local handover, ttl, gap_ms = ARGV[5], tonumber(ARGV[6]), tonumber(ARGV[7])

local owner = redis.call('GET', KEYS[1])
if owner and owner ~= token then
  count('refused')
  return -1
end
if owner then
  redis.call('DEL', KEYS[1])
else
  count('expired')
end
-- Read the line once: with nothing parked (a user without a backlog, the usual
-- case) the user is forgotten at once, without writing 'next' first.
local head = redis.call('ZRANGE', KEYS[3], 0, 0, 'WITHSCORES')
local order = redis.call('HMGET', KEYS[2], 'next', 'sub')
local nxt = tonumber(order[1] or 0)
local moved = false
if (outcome == 'done' or outcome == 'failed') and nxt > 0 and seq >= nxt then
  nxt, moved = seq + 1, true
end
if outcome == 'failed' then skip(seq) end
if #head == 0 then
  redis.call('ZREM', KEYS[5], user)
  if order[2] and nxt > tonumber(order[2]) then
    redis.call('DEL', KEYS[2], KEYS[4])
  elseif moved then
    redis.call('HSET', KEYS[2], 'next', nxt)
  end
  return 0
end
if moved then redis.call('HSET', KEYS[2], 'next', nxt) end
if outcome ~= 'again' then redis.call('ZREMRANGEBYSCORE', KEYS[3], seq, seq) end
return hand_over(user, handover, ttl, gap_ms, nil)
