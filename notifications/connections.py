"""The one place the connections to RabbitMQ and Redis are made from settings: the broker's
parameters for pika, and the Redis client behind the cache (one per process).
And the database's on the hot paths: a worker thread's connections (opened at its boot, kept
between messages), a web request's (trusted when the last request used them a moment ago), and
a cursor whose statements PostgreSQL plans once per connection (the reads every message and
every single accept make)."""

from __future__ import annotations

import functools
import logging
import time
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

    Between messages: with CONN_HEALTH_CHECKS, Django checks a connection (``SELECT 1``) on its
    first use after ``close_old_connections``, which django_dramatiq calls around every message: a
    round trip and a commit per message, most of what a message whose notifications were already
    sent costs (services/delivery/backlog.py). A connection the last message used without an error
    is taken as healthy. One that broke while idle fails the next message's first statement (a
    read: the delivery claims nothing before it); that message is retried, and its connection
    closed after it (``errors_occurred``) and opened afresh for the retry."""

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
        finally:
            self._close_old_connections()

    def _close_old_connections(self, *args: Any, **kwargs: Any) -> None:
        connection: Any
        for connection in db.connections.all(initialized_only=True):
            failed = connection.errors_occurred
            connection.close_if_unusable_or_obsolete()
            if connection.connection is not None and not failed:
                connection.health_check_done = True

    before_process_message = _close_old_connections
    after_process_message = _close_old_connections


# A web request's connections: Django (CONN_HEALTH_CHECKS) checks each with a ``SELECT 1`` round
# trip at the first statement of every request. One that served the last request without an error
# this recently is taken as healthy instead: under load a thread's connection is busy all the time,
# and the check was a round trip per request, most of what sixteen clients' single requests cost
# beyond one client's, whose group leader checks once for its whole group (bench/clients_accept.py).
# One idle for longer (a database restarted meanwhile, say) is checked as Django does.
HEALTHY_FOR_SECONDS = 1.0


def request_connections_stamp(**kwargs: Any) -> None:
    """At a request's end (after Django's own handler has closed what was unusable or too old):
    when each connection still open last served a request without an error."""
    wrapper: Any
    for wrapper in db.connections.all(initialized_only=True):
        if wrapper.connection is not None and not wrapper.errors_occurred:
            wrapper.healthy_at = time.monotonic()


def request_connections_trust() -> None:
    """At a request's start, once Django's request_started handler has reset the health check
    (api/middleware.py): a connection stamped healthy within HEALTHY_FOR_SECONDS skips it."""
    now = time.monotonic()
    wrapper: Any
    for wrapper in db.connections.all(initialized_only=True):
        if wrapper.connection is not None and now - getattr(wrapper, "healthy_at", float("-inf")) < HEALTHY_FOR_SECONDS:
            wrapper.health_check_done = True


def prepared_cursor() -> Any:
    """A cursor whose statements PostgreSQL plans once per connection (psycopg prepares each on the
    server on its first execution and keeps up to 100 a connection). For a read every message runs:
    planning a join costs PostgreSQL ten times what running it does when it finds nothing (a
    message whose notification a backlog claim sent already). Django's own cursors bind parameters
    on the client and are never prepared (it sets psycopg's ``prepare_threshold`` to None); this
    one is wrapped as they are, so it is logged and counted alike. Elsewhere (SQLite), Django's."""
    if connection.vendor != "postgresql":
        return connection.cursor()
    connection.close_if_health_check_failed()
    connection.ensure_connection()
    if connection.connection.prepare_threshold is None:
        # While it is None psycopg prepares nothing, even when asked; with this, only what is asked
        # (Django's client-side cursors never prepare whatever it is).
        connection.connection.prepare_threshold = 2**31
    raw: Any = _prepared_cursor_class()(connection.connection)
    return connection.make_debug_cursor(raw) if connection.queries_logged else connection.make_cursor(raw)


@functools.cache
def _prepared_cursor_class() -> type:
    import psycopg

    class PreparedCursor(psycopg.Cursor):  # type: ignore[type-arg]
        def execute(self, query: Any, params: Any = None, *, prepare: bool | None = None, binary: bool | None = None) -> Any:
            return super().execute(query, params, prepare=True, binary=binary)

        def _send_query_prepared(self, name: bytes, pgq: Any, *, binary: bool | None = None) -> None:
            super()._send_query_prepared(name, pgq, binary=binary)
            # psycopg keeps the statement (``_query``, which Django's query log reads) only for those
            # it did not prepare: without it the log, and the tests counting statements, see None.
            self._query = pgq

    return PreparedCursor
