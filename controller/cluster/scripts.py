"""Ownership changes as atomic Lua scripts (keys: :mod:`controller.cluster.wire`).

A claim returns the previous owner; renewals and releases only touch a hash that still names
the caller's claim, so a slow replica can never take a bridge back from the replica that holds
its newer session. The waits for held results are taken over (``ADOPT``) and marked lost
(``LOSE``) the same way.
"""

from __future__ import annotations

# KEYS[1] bridge hash, KEYS[2] bridges set. ARGV: claim, ttl_ms, replica, name, owner_id, bid.
# Returns the previous owner (or false).
CLAIM_SCRIPT = """
local old = redis.call('HGET', KEYS[1], 'owner')
redis.call('DEL', KEYS[1])
redis.call('HSET', KEYS[1], 'owner', ARGV[1], 'replica', ARGV[3], 'name', ARGV[4],
           'owner_id', ARGV[5], 'devices', '{}')
redis.call('PEXPIRE', KEYS[1], ARGV[2])
redis.call('SADD', KEYS[2], ARGV[6])
return old
"""
# KEYS[1] bridge hash. ARGV: claim, ttl_ms. 1 renewed, 0 someone else's, -1 gone.
RENEW_SCRIPT = """
local owner = redis.call('HGET', KEYS[1], 'owner')
if owner == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return 1
elseif owner then
  return 0
end
return -1
"""
# KEYS[1] bridge hash. ARGV: claim, devices JSON. 1 written, 0 not ours.
INVENTORY_SCRIPT = """
if redis.call('HGET', KEYS[1], 'owner') == ARGV[1] then
  redis.call('HSET', KEYS[1], 'devices', ARGV[2], 'caps', ARGV[3])
  return 1
end
return 0
"""
# KEYS[1] bridge hash, KEYS[2] bridges set. ARGV: claim, bid.
RELEASE_SCRIPT = """
if redis.call('HGET', KEYS[1], 'owner') == ARGV[1] then
  redis.call('DEL', KEYS[1])
  redis.call('SREM', KEYS[2], ARGV[2])
  return 1
end
return 0
"""
# KEYS[1] awaits hash. ARGV: request id, "RID SESSION", ttl_ms. Takes the wait over, unless
# the request is known lost: then returns that marker ("lost REASON"). A request nobody waits
# for is lost too: its wait is shared before it is sent, so the dead replica never sent it, or
# its result was delivered (the wait settled), or the wait expired and the bridge dropped it —
# in no case will a result come.
ADOPT_SCRIPT = """
local old = redis.call('HGET', KEYS[1], ARGV[1])
if not old then
  return 'lost result_lost'
end
if string.sub(old, 1, 5) == 'lost ' then
  return old
end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
redis.call('PEXPIRE', KEYS[1], ARGV[3])
return false
"""
# KEYS[1] awaits hash. ARGV: request id, "lost REASON". Marks a waited-for request lost and
# returns who waited ("RID SESSION"); false if nobody did.
LOSE_SCRIPT = """
local old = redis.call('HGET', KEYS[1], ARGV[1])
if not old or string.sub(old, 1, 5) == 'lost ' then
  return false
end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
return old
"""
# A dead replica's waits outlive it this many TTLs: it takes one TTL to notice the death and
# one heartbeat to adopt its runs; the rest is margin for a loaded store.
AWAIT_TTLS = 3
