"""The one place the connections to RabbitMQ and Redis are made from settings: the broker's
parameters for pika, and the Redis client behind the cache."""

from __future__ import annotations

from typing import Any

import pika
from django.conf import settings


def broker_is_embedded() -> bool:
    """True on the embedded default (Dramatiq's in-process StubBroker, no RabbitMQ)."""
    return bool(settings.BROKER_IS_EMBEDDED)


def broker_connection_parameters(*, timeout: float | None = None) -> pika.URLParameters:
    """The one place RabbitMQ connection parameters are built, for the event consumer and
    publisher, the health check and the queue-size metrics. ``timeout`` bounds every step of a
    probe that must answer quickly (a health check, a scrape)."""
    parameters = pika.URLParameters(settings.BROKER_URL)
    parameters.heartbeat = 30
    parameters.blocked_connection_timeout = 30
    parameters.connection_attempts = 1
    if timeout is not None:
        parameters.socket_timeout = timeout
        parameters.blocked_connection_timeout = timeout
        parameters.stack_timeout = timeout * 2
        parameters.retry_delay = 0
    return parameters


def redis_client() -> Any | None:
    """The Redis client behind the cache (django-redis), shared by the rate limiter, the health
    check and the consumer; None on the embedded local-memory cache."""
    from django.core.cache import cache

    backend = getattr(cache, "client", None)
    if backend is None or not hasattr(backend, "get_client"):
        return None
    return backend.get_client(write=True)


def redis_pubsub_client() -> Any | None:
    """An asyncio Redis client on the cache's server, for a process's live-update subscription
    (notifications/inbox/live.py); None on the embedded default (no Redis)."""
    if not settings.REDIS_URL:
        return None
    import redis.asyncio

    return redis.asyncio.Redis.from_url(settings.REDIS_URL, socket_connect_timeout=2, health_check_interval=30)


def redis_key_prefix() -> str:
    """The prefix of the cache's keys, which names this deployment's (or test run's) Redis channels too."""
    return str(settings.CACHE_KEY_PREFIX)
