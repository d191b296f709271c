"""API tokens that authenticated recently, remembered by this process for a few seconds.

Every API request used to read its client by token hash from PostgreSQL and take and give back a
failed-authentication slot in Redis: three round trips before the request's own work. A token
seen valid within ``API_TOKEN_CACHE_SECONDS`` skips the read and the slot (the address's
failure count is still checked). Revoking or rotating a token forgets every remembered token of
this process at once; other processes stop accepting the old token within those seconds (0
turns the cache off). Only hashes of tokens that authenticated are kept, never a failed guess.

An address past its failed-authentication limit is refused every token this process cannot tell
is good without a query of its own: a guesser's next token must cost no PostgreSQL read. What
tells a good token there is ``active_tokens``, the hashes of every active client's token, read
in one query at most once per ``ACTIVE_TOKENS_RELOAD_SECONDS`` (and at once after this process
creates, rotates or revokes a token): a token created in another process is known here within
those seconds.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Iterable
from typing import Any

_SIZE = 4096  # distinct clients remembered; past it the oldest half is dropped
# What a guesser at a locked-out address can cost: one read of the active hashes per process this
# often, however many tokens it tries.
ACTIVE_TOKENS_RELOAD_SECONDS = 10.0


class KnownTokens:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._entries: dict[str, tuple[float, Any]] = {}

    def get(self, token_hash: str, *, max_age: float) -> Any | None:
        """The client of ``token_hash`` if it authenticated within ``max_age`` seconds."""
        entry = self._entries.get(token_hash)
        if entry is None or time.monotonic() - entry[0] > max_age:
            return None
        return entry[1]

    def remember(self, token_hash: str, client: Any) -> None:
        with self._lock:
            if len(self._entries) >= _SIZE:
                for stale in list(self._entries)[: _SIZE // 2]:
                    del self._entries[stale]
            self._entries[token_hash] = (time.monotonic(), client)

    def forget_all(self) -> None:
        with self._lock:
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


def _active_token_hashes() -> Iterable[str]:
    from .models import ApiClient

    return ApiClient.objects.filter(is_active=True).values_list("token_hash", flat=True).iterator()


known_tokens = KnownTokens()
active_tokens = ActiveTokens(_active_token_hashes)
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=known_tokens.after_fork)
    os.register_at_fork(after_in_child=active_tokens.after_fork)
