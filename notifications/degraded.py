"""Going on while Redis is away: what each user of it does instead, counted, and said once.

PostgreSQL is the outbox, so Redis being down must not stop the API: its throttles fail open.
Going past a provider's rate limit can get an account blocked, so the workers' shared rate limiter
fails closed instead: sends pause and resume by themselves. Every request or send handled without
Redis is counted in ``notifications_degraded_total{component}``; the log gets one warning when a
component starts doing without Redis and one line when Redis answers again, not one per request.

After a failure Redis is left alone for ``RETRY_SECONDS``: a Redis that hangs instead of refusing
would otherwise cost every request a socket timeout (2 s, platform/settings.py), not one request
every few seconds.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import TypeVar

from django_redis.exceptions import ConnectionInterrupted
from redis.exceptions import RedisError

from . import metrics

logger = logging.getLogger("notifications.degraded")
T = TypeVar("T")

# What the cache (django-redis) and a raw Redis client raise when Redis cannot answer.
REDIS_ERRORS: tuple[type[BaseException], ...] = (ConnectionInterrupted, RedisError, OSError)
RETRY_SECONDS = 5.0


class RedisOutage:
    """One component's view of Redis: up, or down and not to be tried again before a moment."""

    def __init__(self, component: str, *, consequence: str) -> None:
        self.component = component
        self.consequence = consequence  # what the component does meanwhile, for the log line
        self._lock = threading.Lock()
        self._down_since: float | None = None
        self._retry_at = 0.0

    def seconds_until_retry(self) -> float:
        """0 when Redis should be tried; else how long it is still being left alone."""
        return max(0.0, self._retry_at - time.monotonic())

    def failed(self, error: BaseException) -> None:
        with self._lock:
            first = self._down_since is None
            if first:
                self._down_since = time.monotonic()
            self._retry_at = time.monotonic() + RETRY_SECONDS
        if first:
            logger.warning(
                "Redis is unreachable (%s: %s); %s until it answers again",
                type(error).__name__,
                error,
                self.consequence,
                extra={"component": self.component},
            )

    def answered(self) -> None:
        if self._down_since is None:  # the common case, without taking the lock
            return
        with self._lock:
            down_since, self._down_since, self._retry_at = self._down_since, None, 0.0
        if down_since is not None:
            logger.info(
                "Redis answers again after %.1f s; %s no more",
                time.monotonic() - down_since,
                self.consequence,
                extra={"component": self.component},
            )

    def degraded(self) -> None:
        """One request or send handled without Redis."""
        metrics.record_degraded(component=self.component)

    def call(self, operation: Callable[[], T], *, fallback: Callable[[], T], counted: bool = True) -> T:
        """``operation()`` unless Redis is down, then ``fallback()``, counted unless ``counted`` is
        False (a second call for a request already counted)."""
        if self.seconds_until_retry() <= 0:
            try:
                result = operation()
            except REDIS_ERRORS as error:
                self.failed(error)
            else:
                self.answered()
                return result
        if counted:
            self.degraded()
        return fallback()

    def reset(self) -> None:
        """Forget an outage (tests; a process that knows Redis is back)."""
        with self._lock:
            self._down_since, self._retry_at = None, 0.0
