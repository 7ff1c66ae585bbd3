"""The Lua scripts RedisStore runs (gateway/state/redis_store.py), each atomic on the server and
one round trip: what each takes and answers, and why it is shaped so, is written above it. Kept
apart from the store so that the store reads as what it does when Redis answers and when not."""

# Sums the window's per-second buckets after adding to the current one, atomically, in one trip.
# The second is Redis's own: a replica's clock read before the trip would let a call that
# Redis runs later name an earlier second than one it already ran, and that call's window
# would miss the newer bucket's retries (two replicas confirmed 19 retries against a bound
# of 10 that way). replicate_commands lets a Redis older than 7 write after TIME; on 7 it is
# a no-op. KEYS: the buckets' common prefix, the call's own marker. ARGV: span, the marker's
# TTL in ms, requests, retries, then for a reservation its reserve and ratio. A call sent again
# (its answer lost with its connection, after it ran: RedisStore._guard) finds its marker and
# adds nothing more; a reservation answers what it was answered the first time.
BUDGET = """
redis.replicate_commands()
local base, span = KEYS[1], tonumber(ARGV[1])
local now = tonumber(redis.call('TIME')[1])
local done = redis.call('GET', KEYS[2])
local addr, addt = tonumber(ARGV[3]), tonumber(ARGV[4])
local cur = base .. now
if not done then
  if addr > 0 then redis.call('HINCRBY', cur, 'r', addr) end
  if addt > 0 then redis.call('HINCRBY', cur, 't', addt) end
  if addr > 0 or addt > 0 then redis.call('EXPIRE', cur, span + 1) end
end
local req, ret = 0, 0
for i = 0, span - 1 do
  local v = redis.call('HMGET', base .. (now - i), 'r', 't')
  req = req + (tonumber(v[1]) or 0)
  ret = ret + (tonumber(v[2]) or 0)
end
if ARGV[5] == nil then
  if not done then redis.call('SET', KEYS[2], '1', 'PX', ARGV[2]) end
  return {req, ret}
end
if done then return {req, ret, tonumber(done)} end
-- A reservation: one more retry, only if the window stays within the budget.
if ret + 1 > tonumber(ARGV[5]) + tonumber(ARGV[6]) * req then
  redis.call('SET', KEYS[2], '0', 'PX', ARGV[2])
  return {req, ret, 0}
end
redis.call('HINCRBY', cur, 't', 1)
redis.call('EXPIRE', cur, span + 1)
redis.call('SET', KEYS[2], '1', 'PX', ARGV[2])
return {req, ret + 1, 1}
"""

# Counts a repeat only when the answer is still there (HINCRBY alone would resurrect it).
# Without one, says whether any answer is remembered at all (KEYS[2], the marker below), so
# that a replica can skip the lookups while none is. KEYS[3]: the call's own marker (ARGV[1]:
# its TTL in ms): a call sent again after its answer was lost answers the count it made.
TAKE = """
if redis.call('EXISTS', KEYS[1]) == 0 then return redis.call('EXISTS', KEYS[2]) end
local n = tonumber(redis.call('GET', KEYS[3]))
if not n then
  n = redis.call('HINCRBY', KEYS[1], 'n', 1)
  redis.call('SET', KEYS[3], n, 'PX', ARGV[1])
end
return {redis.call('HGET', KEYS[1], 'b'), n}
"""

# An answer remembered (KEYS[1]: its hash; ARGV: the body, the TTL in ms), and the marker that
# some answer is (KEYS[2]), which lives as long as the longest-lived one: extended, never
# shortened. One script, not a pipeline holding one: such a pipeline first asks SCRIPT EXISTS
# on a connection it takes before its own cleanup begins, and a timeout there kept that
# connection out of the pool for good (closed by the garbage collector, with a warning).
PUT = """
local ms = tonumber(ARGV[2])
redis.call('DEL', KEYS[1])
redis.call('HSET', KEYS[1], 'b', ARGV[1], 'n', 0)
redis.call('PEXPIRE', KEYS[1], ms)
if redis.call('PTTL', KEYS[2]) < ms then redis.call('SET', KEYS[2], '1', 'PX', ms) end
"""

# A gateway key's admission, atomically: every limit checked before anything is counted, so a
# refused request leaves no trace. KEYS: the minute's window, the slots in flight, the slot's
# own marker, then one hash per budget. ARGV: rpm, tpm, tokens, parallel, slot, now_ms,
# slot_ttl_ms, reserve, budget_ttl_s, then each budget's limit. 0 means "no such limit".
# Returns the verdict, the refusing budget's spend, then what every replica has counted, after
# this admit: the minute's requests and tokens, and each budget's spent and reserved (mirrored
# in the replica's memory, where it counts on from them while Redis does not answer).
#
# Each budget keeps its own reservations beside it (``<budget>:h``, slot -> expiry, and
# ``<budget>:hr``, slot -> reserve) and gives back the expired ones before it is checked: a
# slot expires only when its replica died mid-request (nothing will settle it; a live one is
# kept alive, LEDGER_KEEP), and its reserve then comes back at the next admit on that budget
# by any key (a team's), not only at the next admit of the key that made it, which may never
# come. The marker says the admit is yet to be settled, for as long as a budget is kept: the
# slot's expiry is no sign of that (a request may outlive it, and is then still charged).
#
# The marker there already, the admit ran before: its answer was lost with its connection and
# the call sent again (RedisStore._guard). It is answered "ok" again, counting nothing more;
# counted again, the request held its reservation twice (one given back at its settle), its
# minute's request twice, and found its own slot in flight, refusing itself.
LEDGER_ADMIT = """
local w = KEYS[1]
local function seen(verdict, value)
  local out = {verdict, value, tonumber(redis.call('HGET', w, 'n') or '0'),
               tonumber(redis.call('HGET', w, 'k') or '0')}
  for i = 4, #KEYS do
    local v = redis.call('HMGET', KEYS[i], 's', 'r')
    out[#out + 1] = v[1] or '0'
    out[#out + 1] = v[2] or '0'
  end
  return out
end
if redis.call('EXISTS', KEYS[3]) == 1 then return seen('ok', '0') end
local rpm, tpm, tokens = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local n = tonumber(redis.call('HGET', w, 'n') or '0')
local k = tonumber(redis.call('HGET', w, 'k') or '0')
if rpm > 0 and n + 1 > rpm then return seen('rpm', '0') end
if tpm > 0 and k > 0 and k + tokens > tpm then return seen('tpm', redis.call('HGET', w, 'h') or '0') end
local par, slot, now, ttl = tonumber(ARGV[4]), ARGV[5], tonumber(ARGV[6]), tonumber(ARGV[7])
redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now)
if par > 0 and redis.call('ZCARD', KEYS[2]) >= par then return seen('parallel', '0') end
for i = 4, #KEYS do
  local holds, reserves = KEYS[i] .. ':h', KEYS[i] .. ':hr'
  local gone = redis.call('ZRANGEBYSCORE', holds, '-inf', now)
  if #gone > 0 then
    local back = 0
    for _, s in ipairs(gone) do
      back = back + tonumber(redis.call('HGET', reserves, s) or '0')
      redis.call('HDEL', reserves, s)
    end
    redis.call('ZREMRANGEBYSCORE', holds, '-inf', now)
    if back > 0 and redis.call('EXISTS', KEYS[i]) == 1 then
      redis.call('HINCRBYFLOAT', KEYS[i], 'r', -back)
    end
  end
  local spent = tonumber(redis.call('HGET', KEYS[i], 's') or '0')
  local held = tonumber(redis.call('HGET', KEYS[i], 'r') or '0')
  if spent + held >= tonumber(ARGV[6 + i]) then return seen('budget' .. (i - 4), tostring(spent)) end
end
redis.call('HINCRBY', w, 'n', 1)
redis.call('HINCRBY', w, 'k', tokens)
redis.call('HINCRBY', w, 'h', tokens)
redis.call('EXPIRE', w, 120)
redis.call('ZADD', KEYS[2], now + ttl, slot)
redis.call('PEXPIRE', KEYS[2], ttl)
redis.call('SET', KEYS[3], '1', 'EX', ARGV[9])
for i = 4, #KEYS do
  redis.call('HINCRBYFLOAT', KEYS[i], 'r', ARGV[8])
  redis.call('EXPIRE', KEYS[i], ARGV[9])
  redis.call('ZADD', KEYS[i] .. ':h', now + ttl, slot)
  redis.call('HSET', KEYS[i] .. ':hr', slot, ARGV[8])
  redis.call('EXPIRE', KEYS[i] .. ':h', ARGV[9])
  redis.call('EXPIRE', KEYS[i] .. ':hr', ARGV[9])
end
return seen('ok', '0')
"""

# What a replica spent while Redis did not answer (requests it admitted and settled in its own
# memory), added to the budgets once Redis answers again: once per batch, however often the
# batch is sent (an answer lost, a resend). KEYS: the batch's marker, then the budgets. ARGV:
# the marker's TTL in seconds, then each budget's dollars and TTL.
LEDGER_OWED = """
if not redis.call('SET', KEYS[1], '1', 'NX', 'EX', ARGV[1]) then return 0 end
for i = 2, #KEYS do
  redis.call('HINCRBYFLOAT', KEYS[i], 's', ARGV[2 * i - 2])
  redis.call('EXPIRE', KEYS[i], ARGV[2 * i - 1])
end
return 1
"""

# Settling: the slot back, the reservation turned into what was spent, the minute's tokens
# the request held (``h``) given back. KEYS as LEDGER_ADMIT's. ARGV: token_delta, slot,
# reserve, cost, budget_ttl_s, held tokens. Once per admit, by its marker: a settle sent again
# (its answer was lost) or one for an admit that never ran here changes nothing. Not by its
# slot, which a request longer than the slot's TTL may have lost to a later admit's clean-up:
# such a settle was dropped whole, the request never charged. A budget that already gave the
# reservation back (the slot outlived its expiry) takes the cost only.
LEDGER_SETTLE = """
if redis.call('DEL', KEYS[3]) == 0 then return 0 end
redis.call('ZREM', KEYS[2], ARGV[2])
if redis.call('EXISTS', KEYS[1]) == 1 then
  if tonumber(ARGV[1]) ~= 0 then redis.call('HINCRBY', KEYS[1], 'k', ARGV[1]) end
  if tonumber(ARGV[6] or '0') ~= 0 then redis.call('HINCRBY', KEYS[1], 'h', -tonumber(ARGV[6])) end
end
for i = 4, #KEYS do
  if redis.call('ZREM', KEYS[i] .. ':h', ARGV[2]) == 1 then
    redis.call('HDEL', KEYS[i] .. ':hr', ARGV[2])
    redis.call('HINCRBYFLOAT', KEYS[i], 'r', -tonumber(ARGV[3]))
  end
  redis.call('HINCRBYFLOAT', KEYS[i], 's', ARGV[4])
  redis.call('EXPIRE', KEYS[i], ARGV[5])
end
return 1
"""

# A request still running, its slot kept alive (Accounts keeps each one's every quarter of the
# slot's TTL): it goes on counting toward ``parallel``, and its reservation stays held, past
# the TTL that frees a dead replica's. Only while its marker says it is unsettled (a keep that
# Redis runs after the settle must not bring the slot back). A slot or a budget's hold already
# taken for a dead replica's (this replica was stalled, or Redis away, for most of the TTL) is
# put back, its reserve held again, for its settle to give back. KEYS as LEDGER_ADMIT's. ARGV:
# slot, until (epoch ms), reserve, slot_ttl_ms.
LEDGER_KEEP = """
if redis.call('EXISTS', KEYS[3]) == 0 then return 0 end
local slot, untl, ttl = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[4])
redis.call('ZADD', KEYS[2], untl, slot)
if redis.call('PTTL', KEYS[2]) < ttl then redis.call('PEXPIRE', KEYS[2], ttl) end
for i = 4, #KEYS do
  local holds, keep_s = KEYS[i] .. ':h', redis.call('TTL', KEYS[i])
  if keep_s > 0 then  -- (a budget gone with its period holds nothing)
    if not redis.call('ZSCORE', holds, slot) then
      redis.call('HINCRBYFLOAT', KEYS[i], 'r', ARGV[3])
      redis.call('HSET', KEYS[i] .. ':hr', slot, ARGV[3])
      redis.call('EXPIRE', KEYS[i] .. ':hr', keep_s)
    end
    redis.call('ZADD', holds, untl, slot)
    redis.call('EXPIRE', holds, keep_s)
  end
end
return 1
"""

# Budgets' spend written back to a Redis that lost it (restarted empty: RedisStore._check_kept),
# as a floor: each budget's spent raised to what a replica last knew, never lowered, so that
# replicas doing it at once, or in any order, leave the largest. KEYS: the budgets. ARGV: each
# one's dollars and TTL in seconds.
LEDGER_FLOOR = """
for i = 1, #KEYS do
  local usd = tonumber(ARGV[2 * i - 1])
  if tonumber(redis.call('HGET', KEYS[i], 's') or '0') < usd then
    redis.call('HSET', KEYS[i], 's', ARGV[2 * i - 1])
    if redis.call('TTL', KEYS[i]) < tonumber(ARGV[2 * i]) then redis.call('EXPIRE', KEYS[i], ARGV[2 * i]) end
  end
end
return 1
"""

# A pool deployment's configured limits, taken atomically at its pick: the request counts only
# if this window's requests and tokens stay within them (as LEDGER_ADMIT counts a key's), so
# replicas that pick it at the same moment cannot each spend what the other sees as left.
# KEYS: the window's record, the call's own marker. ARGV: rpm, tpm (0: no such limit), tokens,
# ttl_ms, the marker's TTL in ms, the replica's instance id. A call sent again after its answer
# was lost counts nothing more: it is answered taken, with the window as it is. The tokens also
# go to the replica's own share of the count (``k:<instance>``), which caps what its usages below
# their estimates may take off it later (RECORDS_ADD), and to ``e``, the estimates of calls still
# in flight, which each replica takes off (RECORDS_ADD) as its call is answered: a refusal says
# how much of ``k`` they are (answered {ok, n, k, e}), so that one for estimates that the
# answers will bring down waits for them, not for the minute's end.
RECORDS_TAKE = """
local rpm, tpm, tokens = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local n = tonumber(redis.call('HGET', KEYS[1], 'n') or '0')
local k = tonumber(redis.call('HGET', KEYS[1], 'k') or '0')
local e = tonumber(redis.call('HGET', KEYS[1], 'e') or '0')
if redis.call('EXISTS', KEYS[2]) == 1 then return {1, n, k, e} end
if (rpm > 0 and n + 1 > rpm) or (tpm > 0 and k > 0 and k + tokens > tpm) then return {0, n, k, e} end
n = redis.call('HINCRBY', KEYS[1], 'n', 1)
k = redis.call('HINCRBY', KEYS[1], 'k', tokens)
e = redis.call('HINCRBY', KEYS[1], 'e', tokens)
redis.call('HINCRBY', KEYS[1], 'k:' .. ARGV[6], tokens)
redis.call('PEXPIRE', KEYS[1], ARGV[4])
redis.call('SET', KEYS[2], '1', 'PX', ARGV[5])
return {1, n, k, e}
"""

# The smallest size a pool deployment refused as over its tokens per minute (``f:`` records),
# kept across replicas in one step: the record's ``k`` becomes the size given unless it holds a
# smaller one still in force, and its ``u`` the later of the two ends. KEYS: the record. ARGV:
# tokens, until_ms, now_ms. Answers the ``k`` and ``u`` kept, as written (strings: a Lua number
# comes back cut to an integer). Running it twice keeps the same.
RECORDS_LEAST = """
local k = redis.call('HGET', KEYS[1], 'k')
local u = redis.call('HGET', KEYS[1], 'u')
local kept, ends = ARGV[1], ARGV[2]
if k and u and tonumber(u) > tonumber(ARGV[3]) then
  if tonumber(k) > 0 and tonumber(k) < tonumber(kept) then kept = k end
  if tonumber(u) > tonumber(ends) then ends = u end
end
redis.call('HSET', KEYS[1], 'k', kept, 'u', ends)
redis.call('PEXPIRE', KEYS[1], math.max(0, math.floor(tonumber(ends) - tonumber(ARGV[3]))) + 1000)
return {kept, ends}
"""

# Counts added to records (a pool's sends, seen by every replica), once however often the call
# is sent (its answer lost, sent again). KEYS: the call's own marker, the store's ``kept``
# marker, then the records. ARGV: the marker's TTL in ms, the ``kept`` marker this replica
# knows, the replica's instance id, then for each record its TTL in ms, how many fields, and
# each field with its count.
# A count is lowered (a usage below its call's estimate) only while Redis still holds the
# ``kept`` marker the replica knows: a Redis restarted or flushed since never held the
# estimate, and lowered there it went below what the other replicas had taken (15,000 tokens
# admitted in a 10,000-a-minute minute). A ``k`` is lowered by at most what this replica's own
# estimates still hold of it (``k:<instance>``, raised with each of its adds and takes): a Redis
# restarted from a snapshot, or a replica promoted while behind, keeps the ``kept`` marker but
# lost the latest writes, the estimate among them, and the credit taken from the other
# replicas' share let 12,100 tokens through a 10,000 minute. Never below nothing either. An
# ``e`` (the estimates in flight, RECORDS_TAKE) comes down whatever Redis lost: it admits
# nothing, and held up where ``k`` is not lowered it would say room is coming that is not.
RECORDS_ADD = """
if not redis.call('SET', KEYS[1], '1', 'NX', 'PX', ARGV[1]) then return 0 end
local kept = ARGV[2] ~= '' and redis.call('GET', KEYS[2]) == ARGV[2]
local own = 'k:' .. ARGV[3]
local at = 4
for i = 3, #KEYS do
  local ttl, fields = ARGV[at], tonumber(ARGV[at + 1])
  at = at + 2
  for _ = 1, fields do
    local name, by = ARGV[at], tonumber(ARGV[at + 1])
    if name == 'k' and by < 0 then
      by = kept and -math.min(-by, tonumber(redis.call('HGET', KEYS[i], own) or '0')) or 0
      if by < 0 then redis.call('HINCRBY', KEYS[i], own, by) end
    elseif name == 'k' and by > 0 then
      redis.call('HINCRBY', KEYS[i], own, by)
    elseif by < 0 and not kept and name ~= 'e' then
      by = 0
    end
    if by ~= 0 and redis.call('HINCRBY', KEYS[i], name, by) < 0 then
      redis.call('HSET', KEYS[i], name, 0)
    end
    at = at + 2
  end
  redis.call('PEXPIRE', KEYS[i], ttl)
end
return 1
"""

# Failures counted on circuits, once however often the call is sent (its answer lost, sent
# again), each circuit's record answered. KEYS: the call's own marker, then the circuits.
# ARGV: the marker's TTL in ms, the circuits' TTL in ms, then each circuit's model ('' for none).
CIRCUIT_FAIL = """
local first = redis.call('SET', KEYS[1], '1', 'NX', 'PX', ARGV[1])
local out = {}
for i = 2, #KEYS do
  if first then
    redis.call('HINCRBY', KEYS[i], 'f', 1)
    if ARGV[i + 1] ~= '' then redis.call('HSET', KEYS[i], 'm:' .. ARGV[i + 1], 1) end
    redis.call('PEXPIRE', KEYS[i], ARGV[2])
  end
  out[#out + 1] = redis.call('HGETALL', KEYS[i])
end
return out
"""

# A pool conversation's home, claimed: the one stored stays while it is a member of the pool
# (ARGV[3..]: the members as this replica's config has them), so that replicas which first
# meet a conversation after a reload (a weight changed, a deployment added) send it where its
# prompt cache is, not where the new weights would (returned with 0); else the proposed one
# (ARGV[1]) is stored, and returned with 1 and the one it replaced, if any (a removed
# deployment). ARGV[2]: the TTL in ms.
HOME_CLAIM = """
local cur = redis.call('GET', KEYS[1])
if cur then
  for i = 3, #ARGV do
    if ARGV[i] == cur then
      redis.call('PEXPIRE', KEYS[1], ARGV[2])
      return {cur, 0, ''}
    end
  end
end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
return {ARGV[1], 1, cur or ''}
"""

# A home that did not answer its conversation's turn moved to the deployment that did (ARGV[2]),
# unless another home than the one that failed (ARGV[1]) is stored and a member of the pool
# (ARGV[4..]): another replica's turn moved it since, and it stays. ARGV[3]: the TTL in ms.
# Returned with 1 when this call stored it, else 0 (the break is the replica's that moved it).
HOME_MOVE = """
local cur = redis.call('GET', KEYS[1])
if cur and cur ~= ARGV[1] then
  for i = 4, #ARGV do
    if ARGV[i] == cur then
      redis.call('PEXPIRE', KEYS[1], ARGV[3])
      return {cur, 0}
    end
  end
end
redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[3])
return {ARGV[2], 1}
"""

ALL = (BUDGET, TAKE, PUT, LEDGER_ADMIT, LEDGER_SETTLE, LEDGER_KEEP, LEDGER_OWED, LEDGER_FLOOR, RECORDS_TAKE,
       RECORDS_ADD, RECORDS_LEAST, CIRCUIT_FAIL, HOME_CLAIM, HOME_MOVE)
