"""The Lua scripts of the Redis backend: each queue operation, atomic on the server.

This module has the layout, the shared prelude and the hot path (enqueue and
commit, claim, ack, latest values, touch); :mod:`.lua_admin` the rest.

Layout under a key prefix ``P`` (see :mod:`mediaflow.queue.redis.queue`):

* ``P:s:<flow>/<node>``: one Redis stream per work stream, consumer group
  ``mf``. An item's stream id is ``<seq>-0``, ``seq`` from ``P:seq`` (a hash
  of counters, so seqs are gap-free and never reused).
* An item is *claimed* while it is pending to a real consumer. It is *ready*
  when it was never delivered (after the group's last-delivered id) or is
  pending to the pseudo-consumer ``~ready`` (released or reclaimed: always
  older than every never-delivered item, so ``~ready`` goes first). A
  delivery count of 0 marks a ``~ready`` item as never run.
* ``P:streams`` (set of stream names), ``P:parked`` (flow -> steps, ``""`` for
  none), ``P:latest:<flow>`` (``node.port`` -> JSON), ``P:dead:<flow>`` (a
  stream of dead letters) and ``P:deadflows``, ``P:stats`` (counters).
* ``P:gc:readers`` (a garbage-collection read in progress, by expiry) and
  ``P:gc:seen``: while a read is open, every script that writes a reference
  notes its digests there, so the read cannot miss a reference moved under it.

Every script takes ``ARGV[1]`` = the prefix and ``ARGV[2]`` = the caller's time.
One Redis, not a cluster: the scripts name keys they derive themselves.
"""

from __future__ import annotations

from typing import Final

PRELUDE: Final = r"""
local P = ARGV[1]
local NOW = ARGV[2]
local GROUP = 'mf'
local function skey(name) return P .. ':s:' .. name end
-- A stream's name is flow/node; a node id never holds a '/', a flow's name may.
local function flow_of(name) return string.match(name, '^(.*)/[^/]*$') end
local function is_pseudo(c) return c == '~ready' end
local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
-- A lease's value, <expires_ms>|<holder>: its holder and expiry (nil, 0 for none).
local function parse_lease(v)
  if not v then return nil, 0 end
  local exp, who = string.match(v, '^(%d+)|(.*)$')
  return who, tonumber(exp)
end
local lease_clock_ms  -- the server's clock, read once per script when a lease is seen
-- Whether another executor holds a live lease on the stream (P:lease:<flow>, node ->
-- <expires_ms>|<holder>, by the server's clock). A claim sent before the lease moved
-- and run after it (a call in doubt, sent again once Redis is back) takes nothing
-- there: the new holder reads the stream in order, from what the lease handed back.
local function leased_elsewhere(name, consumer)
  local flow = flow_of(name)
  local lease = redis.call('HGET', P .. ':lease:' .. flow, string.sub(name, #flow + 2))
  local holder, expires = parse_lease(lease)
  if holder == nil or holder == consumer then return false end
  lease_clock_ms = lease_clock_ms or now_ms()
  return expires > lease_clock_ms
end
local function seq_of(id) return tonumber(string.match(id, '^(%d+)-')) end
local function reading()
  return redis.call('ZCOUNT', P .. ':gc:readers', NOW, '+inf') > 0
end
local function gc_note(text)
  for d in string.gmatch(text, 'sha256:' .. string.rep('%x', 64)) do
    redis.call('RPUSH', P .. ':gc:seen', d)
  end
end
local function ensure_stream(name)
  local key = skey(name)
  if redis.call('SADD', P .. ':streams', name) == 1 then
    redis.call('XGROUP', 'CREATE', key, GROUP, '0', 'MKSTREAM')
  end
  return key
end
local function known(name)
  return redis.call('SISMEMBER', P .. ':streams', name) == 1
end
-- The consumer holding `id` and its delivery count, or nil if it is not pending.
local function holder(key, id)
  local p = redis.call('XPENDING', key, GROUP, id, id, 1)
  if #p == 0 then return nil, 0 end
  return p[1][2], tonumber(p[1][4])
end
local function last_delivered_seq(key)
  for _, g in ipairs(redis.call('XINFO', 'GROUPS', key)) do
    local name, last
    for i = 1, #g, 2 do
      if g[i] == 'name' then name = g[i + 1] end
      if g[i] == 'last-delivered-id' then last = g[i + 1] end
    end
    if name == GROUP then return seq_of(last) end
  end
  return 0
end
local function undelivered(key, name)
  local top = tonumber(redis.call('HGET', P .. ':seq', name) or '0')
  return top - last_delivered_seq(key)
end
-- Whether an item of the stream is ready (a new one must not overtake it).
local function has_ready(key, name)
  if #redis.call('XPENDING', key, GROUP, '-', '+', 1, '~ready') > 0 then return true end
  return undelivered(key, name) > 0
end
local function parked(flow) return redis.call('HEXISTS', P .. ':parked', flow) == 1 end
-- One item of a reply (claim, reclaim): name, id, kind, payload, enqueued_at, deliveries.
local function reply_item(out, name, e, deliveries)
  local f = e[2]
  out[#out + 1] = name; out[#out + 1] = e[1]; out[#out + 1] = f[2]
  out[#out + 1] = f[4]; out[#out + 1] = f[6]; out[#out + 1] = deliveries
end
-- Hand every never-delivered item to ~ready, never run (count 0).
local function undelivered_to_ready(key)
  local got = redis.call('XREADGROUP', 'GROUP', GROUP, '~ready', 'STREAMS', key, '>')
  if not got then return end
  for _, e in ipairs(got[1][2]) do
    redis.call('XCLAIM', key, GROUP, '~ready', 0, e[1], 'RETRYCOUNT', 0, 'JUSTID')
  end
end
local function ack_ids(first, count)
  -- ARGV[first..]: name, id pairs. Pending items go, whoever holds them; ready
  -- and unknown ones are left alone and not counted.
  local acked = 0
  for i = first, first + 2 * count - 1, 2 do
    local name, id = ARGV[i], ARGV[i + 1]
    if known(name) then
      local key = skey(name)
      local c = holder(key, id)
      if c and not is_pseudo(c) then
        redis.call('XACK', key, GROUP, id)
        redis.call('XDEL', key, id)
        acked = acked + 1
      end
    end
  end
  if acked > 0 then redis.call('HINCRBY', P .. ':stats', 'acked', acked) end
  return acked
end
local function put_latest(first, count, note)
  for i = first, first + 3 * count - 1, 3 do
    redis.call('HSET', P .. ':latest:' .. ARGV[i], ARGV[i + 1], ARGV[i + 2])
    if note then gc_note(ARGV[i + 2]) end
  end
end
"""

# ARGV: P, now, claim_for ("" for none), n, then per item: name, kind, payload,
# claim (1/0); then n_acks, (name, id)*; then n_latest, (flow, field,
# value)*. Returns per item: seq, deliveries (1 claimed, 0 left ready),
# then the number acked.
ENQUEUE: Final = (
    PRELUDE
    + r"""
local claim_for = ARGV[3]
local note = reading()
local n = tonumber(ARGV[4])
local out = {}
local claimable = {}
-- Items claimed at enqueue are read by one XREADGROUP per stream: they are the
-- stream's only undelivered items (nothing was ready before them), in order.
local to_claim, order = {}, {}
local function claim_now(name)
  local k = to_claim[name]
  if k and k > 0 then
    redis.call('XREADGROUP', 'GROUP', GROUP, claim_for, 'COUNT', k, 'STREAMS', skey(name), '>')
    to_claim[name] = 0
  end
end
local i = 5
for _ = 1, n do
  local name, kind, payload = ARGV[i], ARGV[i + 1], ARGV[i + 2]
  local want = ARGV[i + 3] == '1'
  i = i + 4
  local key = ensure_stream(name)
  if claimable[name] == nil then
    claimable[name] = claim_for ~= '' and not parked(flow_of(name)) and not has_ready(key, name)
      and not leased_elsewhere(name, claim_for)
    order[#order + 1] = name
  end
  local seq = redis.call('HINCRBY', P .. ':seq', name, 1)
  local id = seq .. '-0'
  local delivered = 0
  redis.call('XADD', key, id, 'k', kind, 'p', payload, 't', NOW)
  if claimable[name] and want then
    to_claim[name] = (to_claim[name] or 0) + 1
    delivered = 1
  else
    claimable[name] = false
  end
  if note then gc_note(payload) end
  out[#out + 1] = seq
  out[#out + 1] = delivered
end
for _, name in ipairs(order) do claim_now(name) end
local n_acks = tonumber(ARGV[i])
out[#out + 1] = ack_ids(i + 1, n_acks)
i = i + 1 + 2 * n_acks
put_latest(i + 1, tonumber(ARGV[i]), note)
return out
"""
)

# ARGV: P, now, consumer, n, (name, wanted)*. Returns, per claimed item: name, id,
# kind, payload, enqueued_at, deliveries (oldest first within each stream).
CLAIM: Final = (
    PRELUDE
    + r"""
local consumer = ARGV[3]
local out = {}
local redelivered = 0
local function emit(name, e, deliveries)
  reply_item(out, name, e, deliveries)
  if deliveries > 1 then redelivered = redelivered + 1 end
end
for i = 5, 4 + 2 * tonumber(ARGV[4]), 2 do
  local name, n = ARGV[i], tonumber(ARGV[i + 1])
  if known(name) and not leased_elsewhere(name, consumer) then
    local key = skey(name)
    local flow = flow_of(name)
    local steps = redis.call('HGET', P .. ':parked', flow)
    if steps then n = (steps == '') and 0 or math.min(n, tonumber(steps)) end
    local got = 0
    if n > 0 then
      local ready = redis.call('XPENDING', key, GROUP, '-', '+', n, '~ready')
      if #ready > 0 then
        local ids, counts = {}, {}
        for _, p in ipairs(ready) do ids[#ids + 1] = p[1]; counts[p[1]] = tonumber(p[4]) end
        for _, e in ipairs(redis.call('XCLAIM', key, GROUP, consumer, 0, unpack(ids))) do
          emit(name, e, counts[e[1]] + 1)
          got = got + 1
        end
      end
      if got < n then
        local r = redis.call(
          'XREADGROUP', 'GROUP', GROUP, consumer, 'COUNT', n - got, 'STREAMS', key, '>')
        if r then
          for _, e in ipairs(r[1][2]) do emit(name, e, 1); got = got + 1 end
        end
      end
      if steps and steps ~= '' and got > 0 then
        local left = tonumber(steps) - got
        redis.call('HSET', P .. ':parked', flow, left > 0 and tostring(left) or '')
      end
    end
  end
end
if redelivered > 0 then redis.call('HINCRBY', P .. ':stats', 'redelivered', redelivered) end
return out
"""
)

# ARGV: P, now, n, (name, id)*. Returns how many were pending.
ACK: Final = PRELUDE + "\nreturn ack_ids(4, tonumber(ARGV[3]))\n"

# ARGV: P, now, n, (flow, field, value)*.
PUT_LATEST: Final = PRELUDE + "\nput_latest(4, tonumber(ARGV[3]), reading())\nreturn 0\n"

# ARGV: P, now, consumer, n, (name, id)*. Resets the idle time of the items the
# consumer still holds; returns how many.
TOUCH: Final = (
    PRELUDE
    + r"""
local consumer = ARGV[3]
local touched = 0
for i = 5, 4 + 2 * tonumber(ARGV[4]), 2 do
  local name, id = ARGV[i], ARGV[i + 1]
  if known(name) then
    local key = skey(name)
    if holder(key, id) == consumer then
      redis.call('XCLAIM', key, GROUP, consumer, 0, id, 'JUSTID')
      touched = touched + 1
    end
  end
end
return touched
"""
)
