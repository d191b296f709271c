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

Fair between clients: a caller may name the ``holder`` of the slots it reserves (the API client
whose notifications they are). A holder alone on the bucket reserves as before. While another
holder has asked within SHARED_WINDOW_SECONDS, the bucket is shared: a holder with
BACKLOG_RESERVATIONS reservations still to come or more (a backlog: a broadcast draining, a
batch) may reserve only slots within RATE_LIMIT_HOLD_SECONDS of now, and one with fewer (a client
sending now and then) takes the next slot wherever it is, up to the usual second. So while
clients share a channel, a backlog never has it booked more than that ahead, and a single send of
another client finds its slot within about RATE_LIMIT_HOLD_SECONDS per busy client, where it used
to wait behind a second of the backlog's (the first send of a client new to the channel may still
find a lone backlog's second booked). The backlog keeps whatever the others leave of the rate:
its threads ask again as slots pass.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass

from django.core.cache import cache

from .conf import get_config, redis_client
from .degraded import RedisOutage

# KEYS[1]: the channel's theoretical arrival time (TAT), in microseconds since the epoch. With a
# holder (ARGV[4] > 0): KEYS[2], its reservations still to come (a sorted set of their ends);
# KEYS[3], the holders that asked within ARGV[7] us (by last ask); ARGV[6], the holder.
# ARGV[1]: emission interval (us); ARGV[2]: the longest wait a caller accepts (us); ARGV[3]: how
# many consecutive slots it wants (a batch); ARGV[4]: how far ahead a holder may reserve while
# the bucket is shared (us); ARGV[5]: how many reservations to come make a backlog. While another
# holder asked recently, a holder with a backlog may reserve only within ARGV[4] of now, and one
# without takes the next slot wherever it is (up to max_wait) and more only within ARGV[4]; a
# holder alone reserves as a caller without one. Returns {slots
# reserved (0 = none), wait_us}: the first slot is wait_us away, each next one an interval later;
# with no slot, wait_us says when to come back. Redis' own clock is used so hosts with skewed
# clocks agree. Integers are written with %d: tostring() keeps 14 digits, a microsecond clock 16.
_RESERVE_SCRIPT = """
local interval = tonumber(ARGV[1])
local max_wait = tonumber(ARGV[2])
local wanted = tonumber(ARGV[3])
local hold = tonumber(ARGV[4])
local few = tonumber(ARGV[5])
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local tat = tonumber(redis.call('GET', KEYS[1]) or '0')
if tat < now then tat = now end
local wait = tat - now
local limit = max_wait
local shared = false
if hold > 0 then
  redis.call('ZADD', KEYS[3], now, ARGV[6])
  redis.call('ZREMRANGEBYSCORE', KEYS[3], '-inf', now - tonumber(ARGV[7]))
  redis.call('PEXPIRE', KEYS[3], math.ceil(tonumber(ARGV[7]) / 1000))
  shared = redis.call('ZCARD', KEYS[3]) > 1
end
if shared then
  redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now)
  if redis.call('ZCARD', KEYS[2]) >= few then limit = math.min(max_wait, hold) end
end
if wait > limit then
  return {0, wait - limit}
end
local slots = math.min(wanted, math.floor((max_wait - wait) / interval) + 1)
if shared then
  slots = math.min(slots, math.max(1, math.floor((hold - wait) / interval) + 1))
end
local ends = tat + slots * interval
local ttl_ms = math.ceil((ends - now) / 1000) + 1000
redis.call('SET', KEYS[1], string.format('%d', ends), 'PX', ttl_ms)
if hold > 0 then
  redis.call('ZADD', KEYS[2], ends, string.format('%d', ends))
  redis.call('PEXPIRE', KEYS[2], ttl_ms)
end
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
        self._to_come: dict[str, list[float]] = {}
        self._holders: dict[str, dict[str, float]] = {}

    def reserve(
        self, key: str, interval: float, max_wait: float, count: int, *, holder: str = "", holder_key: str = "", hold: float = 0.0
    ) -> Reservation:
        with self._lock:
            now = time.time()
            tat = max(self._tat.get(key, 0.0), now)
            wait = tat - now
            shared = False
            to_come = [ends for ends in self._to_come.get(holder_key, []) if ends > now]
            if hold > 0:
                asked = self._holders.setdefault(key, {})
                asked[holder] = now
                for name, at in list(asked.items()):
                    if at < now - SHARED_WINDOW_SECONDS:
                        del asked[name]
                shared = len(asked) > 1
            limit = min(max_wait, hold) if shared and len(to_come) >= BACKLOG_RESERVATIONS else max_wait
            if wait > limit:
                return Reservation(False, wait - limit)
            slots = min(count, _whole_intervals(max_wait - wait, interval) + 1)
            if shared:
                slots = min(slots, max(1, _whole_intervals(hold - wait, interval) + 1))
            if hold > 0:
                self._to_come[holder_key] = [*to_come, tat + slots * interval]
            self._tat[key] = tat + slots * interval
            return Reservation(True, wait, slots, interval)


def _whole_intervals(span: float, interval: float) -> int:
    """How many whole ``interval`` fit in ``span``, in microseconds as the Redis script counts:
    in floats 1.0 // 0.1 is 9.0, one slot short of the script's answer."""
    return int(round(span * 1_000_000)) // max(1, int(round(interval * 1_000_000)))


# Reservations still to come that make a holder's a backlog: a client sending a notification every
# quarter second has at most two while its sends wait half a second, so a slow moment does not
# turn it into one; a backlog then books at most two slots past RATE_LIMIT_HOLD_SECONDS.
BACKLOG_RESERVATIONS = 3
# A holder that asked for a slot within this long shares the bucket with the others that did.
SHARED_WINDOW_SECONDS = 60.0

_local = _LocalReserver()
redis_outage = RedisOutage("rate_limiter", consequence="sends are paused")
_script_lock = threading.Lock()
_script = None


def _key(channel: str) -> str:
    return cache.make_key(f"ratelimit:{channel}")


def reserve_send_slot(channel: str, *, account: str = "", max_wait: float = 1.0, count: int = 1, holder: str = "") -> Reservation:
    """Reserve the next send slot of the channel (or the next ``count``, at most as many as fall
    within ``max_wait``), or of its provider ``account`` when that account has a limit of its own
    (``sms:ACxxx=5/s``); sends without a limit are always free. With a ``holder`` (an API
    client), no more than RATE_LIMIT_HOLD_SECONDS of the bucket's time is reserved for it ahead.
    ``count`` 0 (a claim of the backlog alone, whose rows take their slots once claimed): nothing."""
    if count <= 0:
        return Reservation(True, 0.0, 0)
    config = get_config()
    found = config.rate_limit(channel, account)
    if found is None:
        return Reservation(True, 0.0, count)
    bucket, limit = found
    interval = 1.0 / limit.per_second
    hold = config.rate_limit_hold_seconds if holder else 0.0
    holder_key = _key(f"{bucket}:held:{holder}") if holder else ""
    client = redis_client()
    if client is None:
        return _local.reserve(_key(bucket), interval, max_wait, count, holder=holder, holder_key=holder_key, hold=hold)

    def reserve() -> Reservation:
        global _script
        with _script_lock:
            if _script is None:
                _script = client.register_script(_RESERVE_SCRIPT)
        args = [
            int(interval * 1_000_000),
            int(max_wait * 1_000_000),
            count,
            int(hold * 1_000_000),
            BACKLOG_RESERVATIONS,
            holder,
            int(SHARED_WINDOW_SECONDS * 1_000_000),
        ]
        keys = [_key(bucket), holder_key or _key(bucket), _key(f"{bucket}:holders")]
        slots, wait_us = _script(keys=keys, args=args, client=client)
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
