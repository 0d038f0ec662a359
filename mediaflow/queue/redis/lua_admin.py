"""The Lua scripts of the Redis backend off the hot path: handing items back,
reclaiming, dead letters (and an operator's requeue and delete of one), the
backlog and the storage lifecycle.

See :mod:`mediaflow.queue.redis.lua` for the layout and the shared prelude.
"""

from __future__ import annotations

from typing import Final

from mediaflow.queue.redis.lua import PRELUDE

# ARGV: P, now, started (1/0), n, (name, id)*. Pending items go back to ~ready;
# an unstarted one gives its delivery back. Returns how many were pending.
RELEASE: Final = (
    PRELUDE
    + r"""
local started = ARGV[3] == '1'
local released = 0
for i = 5, 4 + 2 * tonumber(ARGV[4]), 2 do
  local name, id = ARGV[i], ARGV[i + 1]
  if known(name) then
    local key = skey(name)
    local c, count = holder(key, id)
    if c and not is_pseudo(c) then
      if not started then count = math.max(count - 1, 0) end
      redis.call('XCLAIM', key, GROUP, '~ready', 0, id, 'RETRYCOUNT', count, 'JUSTID')
      released = released + 1
    end
  end
end
return released
"""
)

# ARGV: P, now, consumer. Every item the consumer holds goes back to ~ready.
RELEASE_CONSUMER: Final = (
    PRELUDE
    + r"""
local consumer = ARGV[3]
local released = 0
for _, name in ipairs(redis.call('SMEMBERS', P .. ':streams')) do
  local key = skey(name)
  while true do
    local held = redis.call('XPENDING', key, GROUP, '-', '+', 1000, consumer)
    if #held == 0 then break end
    for _, p in ipairs(held) do
      redis.call('XCLAIM', key, GROUP, '~ready', 0, p[1], 'RETRYCOUNT', tonumber(p[4]), 'JUSTID')
      released = released + 1
    end
  end
end
return released
"""
)

# ARGV: P, now, idle_ms. Items idle that long go back to ~ready (their redelivery
# is counted at the next claim).
# Returns them as CLAIM does, oldest first within each stream.
RECLAIM: Final = (
    PRELUDE
    + r"""
local idle = tonumber(ARGV[3])
local out = {}
for _, name in ipairs(redis.call('SMEMBERS', P .. ':streams')) do
  local key = skey(name)
  local stale = redis.call('XPENDING', key, GROUP, 'IDLE', idle, '-', '+', 100000)
  for _, p in ipairs(stale) do
    if not is_pseudo(p[2]) then
      local count = tonumber(p[4])
      local e = redis.call('XCLAIM', key, GROUP, '~ready', 0, p[1], 'RETRYCOUNT', count)[1]
      if e then reply_item(out, name, e, count) end
    end
  end
end
return out
"""
)

# ARGV: P, now, name, id, flow, record, reason.
DEAD_LETTER: Final = (
    PRELUDE
    + r"""
local name, id, flow, record, reason = ARGV[3], ARGV[4], ARGV[5], ARGV[6], ARGV[7]
if known(name) then
  local key = skey(name)
  redis.call('XACK', key, GROUP, id)
  redis.call('XDEL', key, id)
end
-- n: one counter for every flow's dead letters, so they sort newest first together.
local n = redis.call('INCR', P .. ':deadseq')
redis.call('XADD', P .. ':dead:' .. flow, '*', 'r', record, 'why', reason, 'at', NOW, 'n', n)
redis.call('SADD', P .. ':deadflows', flow)
redis.call('HINCRBY', P .. ':stats', 'dead_lettered', 1)
if reading() then gc_note(record .. reason) end
return 1
"""
)

# A dead letter's id (DeadLetter.id) is `<n>-<entry id in P:dead:<flow>>`: n, the
# global counter, makes it unique across flows (two flows' dead streams can hold
# the same entry id); the entry id finds it in one seek. The scripts below act
# only on the entry of P:dead:<flow> at that id whose n matches.
_DEAD_ENTRY: Final = r"""
local function dead_entry(dkey, did, n)
  local e = redis.call('XRANGE', dkey, did, did)[1]
  if not e then return nil end
  local f = e[2]
  for i = 1, #f, 2 do
    if f[i] == 'n' then
      if f[i + 1] == n then return e end
      return nil
    end
  end
  return nil
end
"""

# ARGV: P, now, flow, n, did (see above), then the item as the caller read it from
# the dead letter: stream name, kind, payload, deliveries. The item joins the end
# of its stream, ready (pending to ~ready, keeping its deliveries), enqueued now;
# the dead letter goes. Returns the item's seq, or 0 (nothing changed) if the flow
# has no such dead letter (any more).
REQUEUE_DEAD: Final = (
    PRELUDE
    + _DEAD_ENTRY
    + r"""
local flow, n, did = ARGV[3], ARGV[4], ARGV[5]
local name, kind, payload, deliveries = ARGV[6], ARGV[7], ARGV[8], tonumber(ARGV[9])
local dkey = P .. ':dead:' .. flow
if not dead_entry(dkey, did, n) then return 0 end
local key = ensure_stream(name)
local seq = redis.call('HINCRBY', P .. ':seq', name, 1)
local id = seq .. '-0'
redis.call('XADD', key, id, 'k', kind, 'p', payload, 't', NOW)
-- ~ready goes before never-delivered items (see the layout): hand those to ~ready
-- with it, so it stays behind them.
undelivered_to_ready(key)
redis.call('XCLAIM', key, GROUP, '~ready', 0, id, 'RETRYCOUNT', deliveries, 'JUSTID')
redis.call('XDEL', dkey, did)
redis.call('HINCRBY', P .. ':stats', 'requeued', 1)
-- A garbage-collection read may have passed the stream and not reached the dead letter.
if reading() then gc_note(payload) end
return seq
"""
)

# ARGV: P, now, flow, n, did. Returns 1 if the flow's dead letter went, else 0.
DELETE_DEAD: Final = (
    PRELUDE
    + _DEAD_ENTRY
    + r"""
local dkey = P .. ':dead:' .. ARGV[3]
if not dead_entry(dkey, ARGV[5], ARGV[4]) then return 0 end
return redis.call('XDEL', dkey, ARGV[5])
"""
)

# ARGV: P, now. Per stream with waiting work: name, ready, pending, and
# the enqueue time of its oldest unacked item.
BACKLOG: Final = (
    PRELUDE
    + r"""
local out = {}
for _, name in ipairs(redis.call('SMEMBERS', P .. ':streams')) do
  local key = skey(name)
  local summary = redis.call('XPENDING', key, GROUP)
  local total, by = tonumber(summary[1]), {}
  if summary[4] then
    for _, c in ipairs(summary[4]) do by[c[1]] = tonumber(c[2]) end
  end
  local released = by['~ready'] or 0
  local new = undelivered(key, name)
  if total + new > 0 then
    local first = redis.call('XRANGE', key, '-', '+', 'COUNT', 1)[1]
    out[#out + 1] = name
    out[#out + 1] = released + new
    out[#out + 1] = total - released
    out[#out + 1] = first and first[2][6] or NOW
  end
end
return out
"""
)

# ARGV: P, now, before (a Unix time), keep_per_flow. Returns how many went. Age
# is each dead letter's own time (its ``at``), oldest first, not its stream id
# (which carries the server's clock).
TRIM_DEAD: Final = (
    PRELUDE
    + r"""
local before, keep = tonumber(ARGV[3]), tonumber(ARGV[4])
local deleted = 0
for _, flow in ipairs(redis.call('SMEMBERS', P .. ':deadflows')) do
  local key = P .. ':dead:' .. flow
  local old = true
  while old do
    local entries = redis.call('XRANGE', key, '-', '+', 'COUNT', 100)
    if #entries == 0 then break end
    for _, e in ipairs(entries) do
      local at
      for i = 1, #e[2], 2 do if e[2][i] == 'at' then at = tonumber(e[2][i + 1]) end end
      if at >= before then old = false; break end
      deleted = deleted + redis.call('XDEL', key, e[1])
    end
  end
  deleted = deleted + redis.call('XTRIM', key, 'MAXLEN', keep)
end
return deleted
"""
)


# ARGV: P, now, flow. Returns {-waiting} if items of the flow wait, else the
# numbers of latest values and dead letters dropped.
FORGET_FLOW: Final = (
    PRELUDE
    + r"""
local flow = ARGV[3]
local waiting = 0
for _, name in ipairs(redis.call('SMEMBERS', P .. ':streams')) do
  if flow_of(name) == flow then waiting = waiting + redis.call('XLEN', skey(name)) end
end
if waiting > 0 then return {-waiting} end
local latest = redis.call('HLEN', P .. ':latest:' .. flow)
local dead = redis.call('XLEN', P .. ':dead:' .. flow)
redis.call('DEL', P .. ':latest:' .. flow, P .. ':dead:' .. flow)
redis.call('SREM', P .. ':deadflows', flow)
return {latest, dead}
"""
)
