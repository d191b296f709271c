"""A provider that sends nothing and records when it was asked to, for the benchmarks.

Select it with ``EMAIL_PROVIDER=bench.noop_provider.NoopProvider``. Each send appends the time
to a Redis list under the cache's key prefix, so the bench (run with a prefix of its own) can
count sends per 1 s window across every worker process.
"""

from __future__ import annotations

import time

from django.core.cache import cache
from django_redis import get_redis_connection

from notifications.channels.base import OutgoingMessage, SendResult

SENDS_KEY = "bench:sends"


def sends_key() -> str:
    return cache.make_key(SENDS_KEY)


class NoopProvider:
    def send(self, message: OutgoingMessage) -> SendResult:
        get_redis_connection("default").rpush(sends_key(), f"{time.time():.6f}")
        return SendResult(provider_message_id=f"noop-{message.notification_id}", response_summary="noop")


# --- Read by the bench process ---------------------------------------------------------------


def send_times() -> list[float]:
    return sorted(float(value) for value in get_redis_connection("default").lrange(sends_key(), 0, -1))


def send_count() -> int:
    return int(get_redis_connection("default").llen(sends_key()))


def sends_clear() -> None:
    get_redis_connection("default").delete(sends_key())
