"""What the consumer remembers about messages between deliveries: transient failures per event
key (the redelivery limit) and why a message was rejected to the DLQ. Each is kept in the cache
(Redis) for other processes and restarts, and in a bounded map in memory for when Redis is the
thing that is down."""

from __future__ import annotations

import collections
import contextlib
import hashlib
import logging
import threading
from typing import Generic, TypeVar

from django.core.cache import cache

from ..conf import get_config
from ..models import DeadLetterReason

logger = logging.getLogger("notifications.events")

V = TypeVar("V")


class BoundedMap(Generic[V]):
    """A thread-safe map that forgets its least recently written entries past ``max_size``: a
    consumer running for months sees millions of keys, and memory is only the fallback."""

    def __init__(self, max_size: int) -> None:
        self.max_size = max_size
        self._entries: collections.OrderedDict[str, V] = collections.OrderedDict()
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._entries)

    def get(self, key: str) -> V | None:
        with self._lock:
            return self._entries.get(key)

    def set(self, key: str, value: V) -> None:
        with self._lock:
            self._entries.pop(key, None)
            self._entries[key] = value
            while len(self._entries) > self.max_size:
                self._entries.popitem(last=False)

    def pop(self, key: str) -> V | None:
        with self._lock:
            return self._entries.pop(key, None)


class RedeliveryCounter:
    """Transient failures per event key, in the cache and in memory (the larger count wins)."""

    max_local = 10_000

    def __init__(self, *, ttl_seconds: int, max_local: int | None = None) -> None:
        self.ttl_seconds = ttl_seconds
        self._local: BoundedMap[int] = BoundedMap(max_local or self.max_local)

    @staticmethod
    def _cache_key(event_key: str) -> str:
        # Hashed: event keys come from message bodies, cache keys must be short and plain.
        return "events:transient:" + hashlib.sha256(event_key.encode()).hexdigest()

    def increment(self, event_key: str) -> int:
        count = (self._local.get(event_key) or 0) + 1
        cache_key = self._cache_key(event_key)
        try:
            cache.add(cache_key, 0, timeout=self.ttl_seconds)
            count = max(count, int(cache.incr(cache_key)))
        except Exception as exc:  # Redis down (or the key expired between add and incr)
            logger.warning("cannot count redeliveries in the cache (%s); counting in memory", type(exc).__name__)
        self._local.set(event_key, count)
        return count

    def forget(self, event_key: str, *, redelivered: bool = True) -> None:
        counted = self._local.pop(event_key) is not None
        # A first delivery counted nowhere; skipping it spares Redis a DELETE per event.
        if counted or redelivered:
            with contextlib.suppress(Exception):
                cache.delete(self._cache_key(event_key))

    def __len__(self) -> int:
        return len(self._local)


def message_identity(*, body: bytes, routing_key: str, message_id: str | None = None) -> str:
    """What names one message both when it is nacked and when it comes back off the DLQ.

    Dead-lettering keeps the body, the ``message_id`` and (in ``x-death``) the routing key; the
    message id is hashed in rather than used alone, so a publisher reusing ids cannot mix up two
    messages, and identical bodies published with different ids stay apart.
    """
    digest = hashlib.sha256()
    for part in ((message_id or "").encode(), routing_key.encode(), body):
        digest.update(len(part).to_bytes(8, "big"))
        digest.update(part)
    return digest.hexdigest()


class RejectionNotes:
    """Why the consumer nacked a message to the DLQ, kept until the DLQ consumer records it.

    In memory (bounded, oldest dropped first) for the DLQ consumer of the same process, and in the
    cache with a TTL, best effort, for one in another process or after a restart. A note is
    overwritten by the next rejection of the same message rather than taken on read, so identical
    messages rejected alike are all recorded right; an out-of-date note can only be read for a
    message RabbitMQ dead-lettered itself, and ``x-death`` says so then.
    """

    max_local = 10_000

    def __init__(self, *, ttl_seconds: int, max_local: int | None = None) -> None:
        self.ttl_seconds = ttl_seconds
        self._local: BoundedMap[tuple[str, str]] = BoundedMap(max_local or self.max_local)

    @staticmethod
    def _cache_key(identity: str) -> str:
        return "events:rejected:" + identity

    def note(self, identity: str, *, reason: str, error: str) -> None:
        error = error[:4000]
        self._local.set(identity, (str(reason), error))
        try:
            cache.set(self._cache_key(identity), [str(reason), error], timeout=self.ttl_seconds)
        except Exception as exc:  # Redis down: the in-memory note still serves this process
            logger.warning("cannot note a rejection in the cache (%s); noted in memory only", type(exc).__name__)

    def get(self, identity: str) -> tuple[str, str] | None:
        found = self._local.get(identity)
        if found is not None:
            return found
        try:
            cached = cache.get(self._cache_key(identity))
        except Exception as exc:
            logger.warning("cannot read rejection notes from the cache (%s)", type(exc).__name__)
            return None
        if isinstance(cached, list | tuple) and len(cached) == 2 and cached[0] in DeadLetterReason.values:
            return str(cached[0]), str(cached[1])
        return None


_rejection_notes: RejectionNotes | None = None


def rejection_notes() -> RejectionNotes:
    """The process's notes, shared by its event consumer and the DLQ consumer (and direct callers)."""
    global _rejection_notes
    if _rejection_notes is None:
        _rejection_notes = RejectionNotes(ttl_seconds=get_config().events.dedup_ttl_seconds)
    return _rejection_notes
