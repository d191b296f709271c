"""The stream's short blocking steps (a database read, a Redis call) in the loop's shared pool."""

from __future__ import annotations

from typing import Any

from asgiref.sync import sync_to_async
from django.db import close_old_connections


def in_thread(function: Any) -> Any:
    """``function`` as a coroutine run in the loop's shared pool, on a connection of that thread,
    never held for the life of a connection (``thread_sensitive=False``)."""

    def run(*args: Any, **kwargs: Any) -> Any:
        close_old_connections()
        return function(*args, **kwargs)

    return sync_to_async(run, thread_sensitive=False)
