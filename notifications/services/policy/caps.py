"""Per-recipient caps: at most ``count`` notifications of a category to one recipient in any
``per_seconds``; past it a notification ends ``suppressed`` with reason ``throttled``.

The count is a sliding log in Redis (one sorted set of send times per client, category and
recipient), checked and added to by one Lua script, so concurrent accepts in every web process
never let more than ``count`` through, and the window is exact (no burst of twice the cap across
a fixed window's edge). An accept that takes a slot and then writes nothing (its idempotency key
was taken: a replay) gives it back. Critical categories are never capped.

When Redis cannot be reached the cap fails **open**: the notification is sent, and counted in
``notifications_degraded_total{component="recipient_caps"}``. A cap spares a recipient noise; the
platform's promise is to deliver, so an outage of the counter must not drop messages nobody can
send again (degraded.py has the same reasoning for the API's throttles). The embedded default
(no Redis, one process) keeps the same log in memory.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections import deque
from dataclasses import dataclass
from typing import Any

from django.core.cache import cache

from ...conf import redis_client
from ...degraded import RedisOutage
from ...errors import ValidationFailed
from ...models import Category, Notification, Status, SuppressedReason

MAX_CAP_COUNT = 100_000
MAX_CAP_SECONDS = 31 * 24 * 3600

# What a take answers: the slot is taken now, was held by this member already, or the cap is full.
OVER, TAKEN, HELD = 0, 1, 2

# KEYS[1]: the recipient's log (a sorted set of slot ids scored by time in microseconds).
# ARGV[1]: count; ARGV[2]: window (us); ARGV[3]: this slot's id. Returns OVER, TAKEN or HELD.
# Redis' own clock, so web processes on hosts with skewed clocks agree on the window.
_TAKE_SCRIPT = """
local count = tonumber(ARGV[1])
local window = tonumber(ARGV[2])
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now - window)
if redis.call('ZSCORE', KEYS[1], ARGV[3]) then
  return 2
end
if redis.call('ZCARD', KEYS[1]) >= count then
  return 0
end
redis.call('ZADD', KEYS[1], now, ARGV[3])
redis.call('PEXPIRE', KEYS[1], math.ceil(window / 1000) + 1000)
return 1
"""

redis_outage = RedisOutage("recipient_caps", consequence="per-recipient caps are not enforced (fail open)")
_script_lock = threading.Lock()
_script: Any = None


@dataclass(frozen=True)
class RecipientCap:
    """``count`` notifications per ``per_seconds`` to one recipient."""

    count: int
    per_seconds: int


def recipient_cap_check(value: Any, *, field: str = "max_per_recipient") -> dict[str, int] | None:
    """A category's ``max_per_recipient`` as stored: null (no cap) or ``{"count", "per_seconds"}``
    with whole numbers (1 to 100,000 and 1 s to 31 days); ValidationFailed naming the bad part."""
    if value is None:
        return None
    example = 'null or {"count": 5, "per_seconds": 3600}'
    if not isinstance(value, dict):
        raise ValidationFailed(f"{field} is {example}", extra={"field": field})
    unknown = sorted(set(value) - {"count", "per_seconds"})
    if unknown:
        raise ValidationFailed(
            f"{field}.{unknown[0]} is not a field; {field} is {example}", extra={"field": f"{field}.{unknown[0]}"}
        )
    checked: dict[str, int] = {}
    for name, maximum in (("count", MAX_CAP_COUNT), ("per_seconds", MAX_CAP_SECONDS)):
        number = value.get(name)
        # bool is an int in Python; true is no count.
        if isinstance(number, bool) or not isinstance(number, int) or not 1 <= number <= maximum:
            raise ValidationFailed(f"{field}.{name} is a whole number from 1 to {maximum}", extra={"field": f"{field}.{name}"})
        checked[name] = number
    return checked


def category_cap(category: Category | None) -> RecipientCap | None:
    """The cap a notification of ``category`` keeps to; None for none, and for a critical category."""
    if category is None or category.critical or not category.max_per_recipient:
        return None
    value = category.max_per_recipient
    return RecipientCap(count=int(value["count"]), per_seconds=int(value["per_seconds"]))


@dataclass(frozen=True)
class CapSlot:
    """A slot a notification took in its recipient's log; ``release`` gives it back."""

    key: str = ""
    member: str = ""

    def release(self) -> None:
        if not self.key:
            return
        client = redis_client()
        if client is None:
            _local.release(self.key, self.member)
            return
        redis_outage.call(lambda: client.zrem(self.key, self.member), fallback=lambda: 0, counted=False)


NO_SLOT = CapSlot()


def recipient_cap_take(*, notification: Notification, member: str = "") -> CapSlot:
    """Take a slot of the recipient's cap for a notification about to be sent, or suppress it
    (``throttled``) past the cap. A notification that is not going to be sent on its own
    (suppressed already, a digest's member) takes nothing. ``member`` names the slot (default: the
    notification's id); a slot that ``member`` holds already is not taken twice, and NO_SLOT is
    returned for it, as the slot is not this caller's to give back."""
    if notification.status not in (Status.ACCEPTED, Status.QUEUED):
        return NO_SLOT
    cap = category_cap(notification.category)
    if cap is None:
        return NO_SLOT
    key = cache.make_key(f"cap:{notification.client_id}:{notification.category_id}:{notification.user_id}")
    member = member or str(notification.pk or uuid.uuid4())
    taken = _take(key, member, cap)
    if taken == TAKEN:
        return CapSlot(key=key, member=member)
    if taken == HELD:
        return NO_SLOT
    notification.status = Status.SUPPRESSED
    notification.suppressed_reason = SuppressedReason.THROTTLED
    notification.enqueued_at = None
    return NO_SLOT


def _take(key: str, member: str, cap: RecipientCap) -> int:
    """OVER, TAKEN or HELD."""
    client = redis_client()
    if client is None:
        return _local.take(key, member, cap)

    def take() -> int:
        global _script
        with _script_lock:
            if _script is None:
                _script = client.register_script(_TAKE_SCRIPT)
        return int(_script(keys=[key], args=[cap.count, cap.per_seconds * 1_000_000, member], client=client))

    return redis_outage.call(take, fallback=lambda: TAKEN)


class _LocalLog:
    """The embedded default's copy of the sliding log: one process, so a lock makes it atomic."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._logs: dict[str, deque[tuple[float, str]]] = {}

    def take(self, key: str, member: str, cap: RecipientCap) -> int:
        with self._lock:
            now = time.monotonic()
            log = self._logs.setdefault(key, deque())
            while log and log[0][0] <= now - cap.per_seconds:
                log.popleft()
            if any(entry[1] == member for entry in log):
                return HELD
            if len(log) >= cap.count:
                return OVER
            log.append((now, member))
            return TAKEN

    def release(self, key: str, member: str) -> None:
        with self._lock:
            log = self._logs.get(key)
            if log is not None:
                self._logs[key] = deque(entry for entry in log if entry[1] != member)


_local = _LocalLog()
