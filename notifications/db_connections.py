"""A worker thread's database connections between messages: closed when broken or older than
CONN_MAX_AGE, as django_dramatiq's DbConnectionsMiddleware does, but not checked again before a
message when the last one used them without an error."""

from __future__ import annotations

from typing import Any

from django import db
from django_dramatiq.middleware import DbConnectionsMiddleware


class WorkerDbConnectionsMiddleware(DbConnectionsMiddleware):
    """With CONN_HEALTH_CHECKS, Django checks a connection (``SELECT 1``) on its first use after
    ``close_old_connections``, which django_dramatiq calls around every message: a round trip and a
    commit per message, most of what a message whose notifications were already sent costs
    (services/backlog.py). A connection the last message used without an error is taken as
    healthy. One that broke while idle fails the next message's first statement (a read: the
    delivery claims nothing before it); that message is retried, and its connection closed after it
    (``errors_occurred``) and opened afresh for the retry."""

    def _close_old_connections(self, *args: Any, **kwargs: Any) -> None:
        connection: Any
        for connection in db.connections.all(initialized_only=True):
            failed = connection.errors_occurred
            connection.close_if_unusable_or_obsolete()
            if connection.connection is not None and not failed:
                connection.health_check_done = True

    before_process_message = _close_old_connections
    after_process_message = _close_old_connections
