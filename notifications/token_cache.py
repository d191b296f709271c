"""API tokens that authenticated recently, remembered by this process for a few seconds.

Every API request used to read its client by token hash from PostgreSQL and take and give back a
failed-authentication slot in Redis: three round trips before the request's own work. A token
seen valid within ``API_TOKEN_CACHE_SECONDS`` skips the read and the slot (the address's
failure count is still checked). Revoking or rotating a token forgets every remembered token of
this process at once; other processes stop accepting the old token within those seconds (0
turns the cache off). Only hashes of tokens that authenticated are kept, never a failed guess.
"""

from __future__ import annotations

import threading
import time
from typing import Any

_SIZE = 4096  # distinct clients remembered; past it the oldest half is dropped


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


known_tokens = KnownTokens()
