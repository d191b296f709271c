"""API tokens that authenticated recently, remembered by this process, and forgotten by every
process the moment a client changes.

Without it every API request would read its client by token hash from PostgreSQL and take and
give back a failed-authentication slot in Redis: three round trips before the request's own work.
A token seen valid within ``API_TOKEN_CACHE_SECONDS`` skips the read and the slot. What is remembered is
the client as read, so it must never outlive a change to it: rotating or revoking a token,
deactivating a client, setting its status webhook URL or its limits goes through
``api_client_changed``, which (once the change commits) publishes on a Redis channel every web
process listens to (``ClientChanges``: a thread per process); each forgets every client it holds
at once. While a process is not listening (Redis down, its subscription lost and not yet back) it
remembers nothing, so a change it could have missed is never served from memory; on the embedded
default (one process, no Redis) forgetting locally is enough. ``API_TOKEN_CACHE_SECONDS`` stays as
the upper bound if a message were lost all the same (0 turns the cache off). A request that read
its client before a change and remembers it after is not kept (``KnownTokens.generation``). Only
hashes of tokens that authenticated are kept, never a failed guess.

An address past its failed-authentication limit is refused every token this process cannot tell
is good without a query of its own: a guesser's next token must cost no PostgreSQL read. What
tells a good token there is ``active_tokens``, the hashes of every active client's token, read
in one query at most once per ``ACTIVE_TOKENS_RELOAD_SECONDS``, and again at once after any
process creates, rotates or revokes a token (the same change message).
"""

from __future__ import annotations

import contextlib
import logging
import os
import random
import threading
import time
from collections.abc import Callable, Iterable
from typing import Any

logger = logging.getLogger("notifications.token_cache")

_SIZE = 4096  # distinct clients remembered; past it the oldest half is dropped
# What a guesser at a locked-out address can cost: one read of the active hashes per process this
# often, however many tokens it tries.
ACTIVE_TOKENS_RELOAD_SECONDS = 10.0


# Set on a client object this cache hands out: what it holds may be older than the database's row
# by the time a change message arrives (status_events reads the URL again rather than trust it).
REMEMBERED_MARK = "_from_token_cache"


class KnownTokens:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._entries: dict[str, tuple[float, Any]] = {}
        # Bumped by every forget: a client read before a change is not remembered after it.
        self.generation = 0

    def get(self, token_hash: str, *, max_age: float) -> Any | None:
        """The client of ``token_hash`` if it authenticated within ``max_age`` seconds and no
        change can have been missed since (client_changes is listening, where there is Redis)."""
        entry = self._entries.get(token_hash)
        if entry is None or time.monotonic() - entry[0] > max_age or not client_changes.trusted():
            return None
        return entry[1]

    def remember(self, token_hash: str, client: Any, *, generation: int) -> None:
        """Keep ``client``, read while the cache was at ``generation``, unless it changed since."""
        with self._lock:
            if generation != self.generation:
                return
            if len(self._entries) >= _SIZE:
                for stale in list(self._entries)[: _SIZE // 2]:
                    del self._entries[stale]
            setattr(client, REMEMBERED_MARK, True)
            self._entries[token_hash] = (time.monotonic(), client)

    def forget_all(self) -> None:
        with self._lock:
            self.generation += 1
            self._entries.clear()

    def after_fork(self) -> None:
        self._lock = threading.Lock()  # a lock another thread held at the fork stays held in the child


class ActiveTokens:
    """The token hashes of every active API client, as of a recent read."""

    def __init__(self, load: Callable[[], Iterable[str]]) -> None:
        self._load = load
        self._lock = threading.Lock()
        self._hashes: frozenset[str] = frozenset()
        self._loaded_at: float | None = None

    def contains(self, token_hash: str) -> bool:
        """Whether ``token_hash`` was an active client's at the last read, reading again first
        when that read is older than ``ACTIVE_TOKENS_RELOAD_SECONDS`` (or was dropped)."""
        if not self._stale():
            return token_hash in self._hashes
        with self._lock:
            if self._stale():  # the thread before us may have read them
                self._hashes = frozenset(self._load())
                self._loaded_at = time.monotonic()
            return token_hash in self._hashes

    def _stale(self) -> bool:
        loaded_at = self._loaded_at
        return loaded_at is None or time.monotonic() - loaded_at >= ACTIVE_TOKENS_RELOAD_SECONDS

    def forget(self) -> None:
        """A token was created, rotated or revoked: read them again when next asked."""
        self._loaded_at = None

    def after_fork(self) -> None:
        self._lock = threading.Lock()


def _forget_every_client() -> None:
    known_tokens.forget_all()
    active_tokens.forget()


class ClientChanges:
    """The "an API client changed" message between processes: a Redis channel every web process
    subscribes to from a thread of its own, started with the process's first token lookup."""

    CHANNEL = "api_client_changed"
    RECONNECT_SECONDS = 1.0

    def __init__(self, redis: Callable[[], Any], channel: Callable[[], str]) -> None:
        self._redis = redis
        self._channel = channel
        self._lock = threading.Lock()
        self._listening = threading.Event()
        self._started_in: int | None = None  # the pid whose thread listens (a fork has none)

    def trusted(self) -> bool:
        """Whether what this process remembers can be served: no Redis (a change is made and
        forgotten in this one process), or a subscription that is up."""
        if self._listening.is_set():
            return True
        if self._redis() is None:
            return True
        self._start()
        return False

    def publish(self) -> None:
        """Tell every process (this one at once) to forget the clients it remembers."""
        _forget_every_client()
        redis = self._redis()
        if redis is None:
            return
        try:
            redis.publish(self._channel(), "1")
        except Exception:
            # Not told: the others serve what they hold for API_TOKEN_CACHE_SECONDS at most.
            logger.warning("could not publish an API client change; other processes forget it within API_TOKEN_CACHE_SECONDS")

    def _start(self) -> None:
        with self._lock:
            if self._started_in == os.getpid():
                return
            self._started_in = os.getpid()
        threading.Thread(target=self._listen, name="api-client-changes", daemon=True).start()

    def _listen(self) -> None:
        while True:
            pubsub = None
            try:
                redis = self._redis()
                if redis is None:
                    return
                pubsub = redis.pubsub(ignore_subscribe_messages=True)
                pubsub.subscribe(self._channel())
                # Subscribed: what was remembered before may have missed a change meanwhile.
                _forget_every_client()
                self._listening.set()
                while True:
                    if pubsub.get_message(timeout=5.0) is not None:
                        _forget_every_client()
            except Exception:
                if self._listening.is_set():
                    logger.warning("lost the API client change subscription; not remembering tokens until it is back")
            finally:
                self._listening.clear()
                if pubsub is not None:
                    with contextlib.suppress(Exception):  # closing a broken connection
                        pubsub.close()
            time.sleep(self.RECONNECT_SECONDS * (0.5 + random.random()))  # noqa: S311  (jitter)

    def after_fork(self) -> None:
        self._lock = threading.Lock()
        self._listening = threading.Event()  # the parent's thread is not in this process


def api_client_changed() -> None:
    """Call in the transaction that changes an API client's token, state, status webhook URL or
    limits: this process forgets what it remembers now, every process once the change commits."""
    from django.db import transaction

    _forget_every_client()
    transaction.on_commit(client_changes.publish)


def _redis_client() -> Any:
    from .conf import redis_client

    return redis_client()


def _channel_name() -> str:
    from django.core.cache import cache

    return str(cache.make_key(ClientChanges.CHANNEL))


def _active_token_hashes() -> Iterable[str]:
    from .models import ApiClient

    return ApiClient.objects.filter(is_active=True).values_list("token_hash", flat=True).iterator()


known_tokens = KnownTokens()
active_tokens = ActiveTokens(_active_token_hashes)
client_changes = ClientChanges(_redis_client, _channel_name)
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=known_tokens.after_fork)
    os.register_at_fork(after_in_child=active_tokens.after_fork)
    os.register_at_fork(after_in_child=client_changes.after_fork)
