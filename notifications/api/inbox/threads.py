"""The stream's short blocking steps (a database read, a Redis call) in the loop's shared pool."""

from __future__ import annotations

from typing import Any

from asgiref.sync import sync_to_async

from ...connections import database_connections_refresh


def in_thread(function: Any) -> Any:
    """``function`` as a coroutine run in the loop's shared pool, on a connection of that thread,
    never held for the life of a connection (``thread_sensitive=False``)."""

    def run(*args: Any, **kwargs: Any) -> Any:
        # As a loop's unit of work: a connection idle for a while is checked before it is used
        # (CONN_HEALTH_CHECKS is off: notifications/connections.py).
        database_connections_refresh()
        return function(*args, **kwargs)

    return sync_to_async(run, thread_sensitive=False)
