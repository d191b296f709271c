"""The one place the connections to RabbitMQ and Redis are made from settings: the broker's
parameters for pika, and the Redis client behind the cache (one per process).
And the database's on the hot paths: a worker thread's connections (opened at its boot, kept
between messages), the health checks of a request's or a loop's (only of those idle for a while),
and a cursor whose statements PostgreSQL plans once per connection (the reads every message and
every single accept make). Public APIs of Django and psycopg only."""

from __future__ import annotations

import functools
import logging
import time
import weakref
from typing import Any

import pika
from django import db
from django.conf import settings
from django.db import connection
from django_dramatiq.middleware import DbConnectionsMiddleware

logger = logging.getLogger("notifications.worker")


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


# The Redis client of each cache configuration, made once per process. Django's cache object is
# per thread and, under ASGI, per request (asgiref's Local), and django-redis makes a client for
# each: a client object per request for the throttle's one call (bench/clients_accept.py). A Redis
# client is thread-safe (its connection pool is), so one serves every thread.
_redis_clients: dict[tuple[str, str], Any] = {}


def redis_client() -> Any | None:
    """The Redis client behind the cache (django-redis), shared by the rate limiter, the health
    check and the consumer; None on the embedded local-memory cache."""
    config = settings.CACHES["default"]
    key = (str(config.get("LOCATION")), repr(config.get("OPTIONS")))
    client = _redis_clients.get(key)
    if client is not None:
        return client
    from django.core.cache import cache

    backend = getattr(cache, "client", None)
    if backend is None or not hasattr(backend, "get_client"):
        return None
    return _redis_clients.setdefault(key, backend.get_client(write=True))


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


class WorkerConnectionsMiddleware(DbConnectionsMiddleware):
    """A worker thread's connections: opened at its boot, kept between its messages.

    At boot (``after_worker_thread_boot``) each thread opens its database connection and its Redis
    client (Django's connections and the cache are per thread), which its first message opened
    before: that slowed the first second of every worker process by about a tenth (a backlog
    waiting for a deploy, bench/email_singles.py), and a database or Redis that is down now shows in
    the worker's log at start. A failure there is logged and left to the first message, as before.

    Between messages django_dramatiq's ``close_old_connections`` runs, and with CONN_HEALTH_CHECKS
    off (platform/settings.py) Django sends no ``SELECT 1`` before a message's first statement: a
    round trip and a commit per message, most of what a message whose notifications were already
    sent costs (services/delivery/backlog.py). A connection the last message used without an error
    is reused as it is. One that broke while idle fails the next message's first statement (a read:
    the delivery claims nothing before it); that message is retried, and its connection, which had
    an error, is checked after it by ``close_old_connections`` and opened afresh for the retry."""

    def after_worker_thread_boot(self, broker: Any, thread: Any) -> None:
        try:
            connection.ensure_connection()
            client = redis_client()
            if client is not None:
                client.ping()
        except Exception:
            logger.warning(
                "a worker thread could not open its connections at start; its first message will try again", exc_info=True
            )


# Django's CONN_HEALTH_CHECKS checks every connection with a ``SELECT 1`` round trip before the
# first statement of every request; it is off (platform/settings.py) and the places that want a
# check ask for it here. A connection that served a request (or passed a check) this recently is
# taken as healthy: under load a thread's connection is busy all the time, and the check was a
# round trip per request, most of what sixteen clients' single requests cost beyond one client's,
# whose group leader checks once for its whole group (bench/clients_accept.py). One idle for longer
# (a database restarted meanwhile, say) is checked, and replaced when it fails, as Django does.
HEALTHY_FOR_SECONDS = 1.0
# Each of this process's connections (Django's per-thread wrappers) -> when it last served a
# request or passed a check (time.monotonic()).
_healthy_at: weakref.WeakKeyDictionary[Any, float] = weakref.WeakKeyDictionary()


def database_connections_stamp(**kwargs: Any) -> None:
    """At a request's end, after Django's own request_finished handler (``close_old_connections``:
    one that had an error is checked, and closed when unusable or too old): those still open are healthy."""
    now = time.monotonic()
    for wrapper in db.connections.all(initialized_only=True):
        if wrapper.connection is not None:
            _healthy_at[wrapper] = now


def database_connections_vet() -> None:
    """Before a request's or a loop's work: each open connection not known healthy within
    HEALTHY_FOR_SECONDS is checked (``SELECT 1``) and closed when unusable, so that its first
    statement opens a new one rather than fail."""
    now = time.monotonic()
    for wrapper in db.connections.all(initialized_only=True):
        if wrapper.connection is None or now - _healthy_at.get(wrapper, float("-inf")) < HEALTHY_FOR_SECONDS:
            continue
        if wrapper.is_usable():
            _healthy_at[wrapper] = now
        else:
            wrapper.close()


def database_connections_refresh() -> None:
    """Between two units of work of a loop (a sweep, an event): Django's ``close_old_connections``
    (an error, the age), then the check of those idle for a while (database_connections_vet)."""
    db.close_old_connections()
    database_connections_vet()


def prepared_cursor() -> Any:
    """A cursor whose statements PostgreSQL plans once per connection: psycopg prepares each on the
    server at its first execution (``execute(..., prepare=True)``; OPTIONS ``prepare_threshold`` in
    platform/settings.py lets it) and keeps up to ``prepared_max`` (100) a connection. For a read
    every message runs: planning a join costs PostgreSQL ten times what running it does when it
    finds nothing (a message whose notification a backlog claim sent already). Django's own cursors
    bind parameters on the client and are never prepared; this one is wrapped as they are, so it
    is logged and counted alike. Elsewhere (SQLite), Django's."""
    if connection.vendor != "postgresql":
        return connection.cursor()
    connection.ensure_connection()
    raw = _prepared_cursor_classes()[0](connection.connection)
    if connection.queries_logged:
        return _prepared_cursor_classes()[1](raw, connection)
    return connection.make_cursor(raw)


@functools.cache
def _prepared_cursor_classes() -> tuple[type, type]:
    import psycopg
    from django.db.backends.utils import CursorDebugWrapper, CursorWrapper

    class PreparedCursor(psycopg.Cursor):  # type: ignore[type-arg]
        def execute(self, query: Any, params: Any = None, *, prepare: bool | None = None, binary: bool | None = None) -> Any:
            return super().execute(query, params, prepare=True, binary=binary)

    class PreparedDebugCursor(CursorDebugWrapper):
        """Django's query log of a prepared statement: the statement as written. Django's own reads
        the statement psycopg ran back from the cursor, which psycopg keeps only for those it did not prepare."""

        def execute(self, sql: Any, params: Any = None) -> Any:
            with self.debug_sql(sql, params):
                return CursorWrapper.execute(self, sql, params)

    return PreparedCursor, PreparedDebugCursor
