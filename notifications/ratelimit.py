"""Per-channel send rate limits shared by every worker process and host.

The algorithm is GCRA (the generic cell rate algorithm, as in redis-cell) in *reserving* form:
each caller atomically reserves the next free send slot of its channel and is told how long to
wait for it. Slots are spaced exactly ``1/rate`` apart, so no 1 s window can hold more than the
limit (plus the one slot at its edge), and waiting callers never stampede: each has its own slot.
A caller whose slot would be further away than ``max_wait`` reserves nothing and is told to come
back later, which the actor does by putting its message back on the queue for that long.

With Redis configured (django-redis), the reservation is one Lua script, atomic across hosts. On
the embedded default there is only one process, so a lock-protected in-memory copy of the same
algorithm does. When Redis cannot be reached nothing is reserved: every worker would otherwise
send at the full limit on its own, so sends pause (the caller is told to come back in a few
seconds) and resume by themselves once Redis answers (see notifications/degraded.py).
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass

from django.core.cache import cache

from .conf import get_config, redis_client
from .degraded import RedisOutage

# KEYS[1]: the channel's theoretical arrival time (TAT), in microseconds since the epoch.
# ARGV[1]: emission interval (us); ARGV[2]: the longest wait a caller accepts (us); ARGV[3]: how
# many consecutive slots it wants (a batch). Returns {slots reserved (0 = none), wait_us}: the
# first slot is wait_us away, each next one an interval later, none past max_wait. Redis' own
# clock is used so hosts with skewed clocks agree.
_RESERVE_SCRIPT = """
local interval = tonumber(ARGV[1])
local max_wait = tonumber(ARGV[2])
local wanted = tonumber(ARGV[3])
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local tat = tonumber(redis.call('GET', KEYS[1]) or '0')
if tat < now then tat = now end
local wait = tat - now
if wait > max_wait then
  return {0, wait - max_wait}
end
local slots = math.min(wanted, math.floor((max_wait - wait) / interval) + 1)
local ttl_ms = math.ceil((tat + slots * interval - now) / 1000) + 1000
redis.call('SET', KEYS[1], tostring(tat + slots * interval), 'PX', ttl_ms)
return {slots, wait}
"""


@dataclass(frozen=True)
class Reservation:
    """``reserved``: ``slots`` slots are held, the first after ``wait_seconds``, each next one
    ``interval`` later. Otherwise retry after ``wait_seconds``."""

    reserved: bool
    wait_seconds: float
    slots: int = 1
    interval: float = 0.0

    def slot_wait(self, index: int) -> float:
        """Seconds from the reservation to slot ``index`` (0-based)."""
        return self.wait_seconds + index * self.interval


class _LocalReserver:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._tat: dict[str, float] = {}

    def reserve(self, key: str, interval: float, max_wait: float, count: int) -> Reservation:
        with self._lock:
            now = time.time()
            tat = max(self._tat.get(key, 0.0), now)
            wait = tat - now
            if wait > max_wait:
                return Reservation(False, wait - max_wait)
            slots = min(count, int((max_wait - wait) // interval) + 1)
            self._tat[key] = tat + slots * interval
            return Reservation(True, wait, slots, interval)


_local = _LocalReserver()
redis_outage = RedisOutage("rate_limiter", consequence="sends are paused")
_script_lock = threading.Lock()
_script = None


def _key(channel: str) -> str:
    return cache.make_key(f"ratelimit:{channel}")


def reserve_send_slot(channel: str, *, account: str = "", max_wait: float = 1.0, count: int = 1) -> Reservation:
    """Reserve the next send slot of the channel (or the next ``count``, at most as many as fall
    within ``max_wait``), or of its provider ``account`` when that account has a limit of its own
    (``sms:ACxxx=5/s``); sends without a limit are always free."""
    found = get_config().rate_limit(channel, account)
    if found is None:
        return Reservation(True, 0.0, count)
    bucket, limit = found
    interval = 1.0 / limit.per_second
    client = redis_client()
    if client is None:
        return _local.reserve(_key(bucket), interval, max_wait, count)

    def reserve() -> Reservation:
        global _script
        with _script_lock:
            if _script is None:
                _script = client.register_script(_RESERVE_SCRIPT)
        args = [int(interval * 1_000_000), int(max_wait * 1_000_000), count]
        slots, wait_us = _script(keys=[_key(bucket)], args=args, client=client)
        return Reservation(bool(slots), int(wait_us) / 1_000_000, int(slots) or 1, interval)

    def come_back_later() -> Reservation:
        # At least a second: the message goes back through the broker, and Redis is not tried
        # again before then anyway.
        return Reservation(False, max(1.0, redis_outage.seconds_until_retry()))

    return redis_outage.call(reserve, fallback=come_back_later)


def wait_for_send_slot(channel: str, *, account: str = "", max_wait: float = 1.0) -> Reservation:
    """Reserve a slot and sleep until it comes; the caller sends right after. Never sleeps past
    ``max_wait``: beyond that it returns an unreserved Reservation saying when to come back."""
    reservation = reserve_send_slot(channel, account=account, max_wait=max_wait)
    if reservation.reserved and reservation.wait_seconds > 0:
        time.sleep(reservation.wait_seconds)
    return reservation
