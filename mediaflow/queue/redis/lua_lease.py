"""The Lua scripts of the Redis backend's leases: executors of a flow sharing
its ordered streams (see :meth:`WorkQueue.lease
<mediaflow.queue.contract.WorkQueue.lease>`).

Layout under the key prefix ``P`` (the rest is in :mod:`.lua`):

* ``P:lease:<flow>``: a hash, node -> ``<expires_ms>|<holder>``;
* ``P:members:<flow>``: a sorted set of the flow's executors by expiry (ms);
* ``P:leaseflows``: the flows with leases or members, so a dead consumer's
  can be dropped without a scan.

Expiry is judged by the Redis server's clock (``TIME``), the one clock every
executor on every machine shares.
"""

from __future__ import annotations

from typing import Final

from mediaflow.queue.redis.lua import PRELUDE

LEASE_PRELUDE: Final = r"""
-- now_ms and parse_lease are the PRELUDE's (:mod:`.lua`).
local function drop_leases_of(flow, consumer)
  local lkey = P .. ':lease:' .. flow
  local flat = redis.call('HGETALL', lkey)
  for i = 1, #flat, 2 do
    local who = parse_lease(flat[i + 1])
    if who == consumer then redis.call('HDEL', lkey, flat[i]) end
  end
  redis.call('ZREM', P .. ':members:' .. flow, consumer)
end
"""

# ARGV: P, now, flow, consumer, ttl_ms, leave (1/0), n, hold nodes..., n,
# acquire nodes..., n, release nodes... Returns {holders (node, holder)*,
# members, taken nodes, handed back}.
LEASE: Final = (
    PRELUDE
    + LEASE_PRELUDE
    + r"""
local flow, consumer, ttl = ARGV[3], ARGV[4], tonumber(ARGV[5])
local leave = ARGV[6] == '1'
local lkey, mkey = P .. ':lease:' .. flow, P .. ':members:' .. flow
local now = now_ms()
local until_ms = now + ttl
local i = 7
local function nodes()
  local n = tonumber(ARGV[i]); local out = {}
  for j = 1, n do out[j] = ARGV[i + j] end
  i = i + n + 1
  return out
end
local hold, acquire, release = nodes(), nodes(), nodes()
local taken, handed = {}, 0
redis.call('SADD', P .. ':leaseflows', flow)
if leave then
  drop_leases_of(flow, consumer)
else
  redis.call('ZADD', mkey, until_ms, consumer)
  for _, node in ipairs(hold) do
    local who, exp = parse_lease(redis.call('HGET', lkey, node))
    if who == consumer and exp > now then
      redis.call('HSET', lkey, node, until_ms .. '|' .. consumer)
    end
  end
  for _, node in ipairs(acquire) do
    local who, exp = parse_lease(redis.call('HGET', lkey, node))
    if who == nil or who == consumer or exp <= now then
      redis.call('HSET', lkey, node, until_ms .. '|' .. consumer)
      local name = flow .. '/' .. node
      if known(name) then
        local key, back = skey(name), 0
        for _, c in ipairs(redis.call('XINFO', 'CONSUMERS', key, GROUP)) do
          local cname
          for k = 1, #c, 2 do if c[k] == 'name' then cname = c[k + 1] end end
          -- The taker's own too: a lease it lost (lapsed unrenewed) and takes
          -- again finds what it dropped from memory here, to run first, in order.
          if not is_pseudo(cname) then
            while true do
              local held = redis.call('XPENDING', key, GROUP, '-', '+', 1000, cname)
              if #held == 0 then break end
              for _, p in ipairs(held) do
                redis.call('XCLAIM', key, GROUP, '~ready', 0, p[1],
                  'RETRYCOUNT', tonumber(p[4]), 'JUSTID')
                back = back + 1
              end
            end
          end
        end
        if back > 0 then taken[#taken + 1] = node; handed = handed + back end
      end
    end
  end
end
for _, node in ipairs(release) do
  local who = parse_lease(redis.call('HGET', lkey, node))
  if who == consumer then redis.call('HDEL', lkey, node) end
end
redis.call('ZREMRANGEBYSCORE', mkey, '-inf', now)
local holders = {}
local flat = redis.call('HGETALL', lkey)
for j = 1, #flat, 2 do
  local who, exp = parse_lease(flat[j + 1])
  if exp > now then
    holders[#holders + 1] = flat[j]; holders[#holders + 1] = who
  else
    redis.call('HDEL', lkey, flat[j])
  end
end
return {holders, redis.call('ZRANGE', mkey, 0, -1), taken, handed}
"""
)

# ARGV: P, now. Drops every lease and membership of consumer ARGV[3].
DROP_CONSUMER: Final = (
    PRELUDE
    + LEASE_PRELUDE
    + r"""
for _, flow in ipairs(redis.call('SMEMBERS', P .. ':leaseflows')) do
  drop_leases_of(flow, ARGV[3])
end
return 0
"""
)
