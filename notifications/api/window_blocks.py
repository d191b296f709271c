"""What a web process keeps between requests so that a known client's request needs no Redis call.

Counting each request in Redis would cost every request of a known client a round trip (what
that costs an accept: docs/performance.md). Blocks of a client's window spare it on most
requests: a process takes the client's window slots from the shared count in blocks (one INCRBY
of ``block_for(rate)``) and hands them out itself, to any of its threads. The shared count includes every slot handed to
any process, so the web tier together never lets more than the rate through. What a process
holds and has not used yet is refused to the others until the window ends: at most ``block - 1``
per process and client (one block is fetched at a time, and only once the last is used up; the
requests that find it in flight count one slot each), kept under 0.5 % of the rate, and none at
all below 400 requests a window, where a block is one slot and counting is exact.

The blocks are the process's, not a thread's or a Redis client object's (django-redis makes one
per thread, and Django's runserver a thread per request): held per thread, each request of
runserver would take a block of its own and use one slot of it.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Hashable

_BLOCK_MAX = 32
_SIZE = 4096  # keys held; past it everything is dropped (a new window drops its keys anyway)


def block_for(rate: int) -> int:
    """The slots one Redis call takes for a client whose window allows ``rate`` requests."""
    return max(1, min(_BLOCK_MAX, rate // 200))


class WindowBlocks:
    """Slots of clients' throttle windows that this process holds, by window."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._left: dict[Hashable, int] = {}
        self._fetching: set[Hashable] = set()

    def claim(self, window: Hashable, block: int) -> int:
        """A slot for a request of ``window``: 0 when one this process holds was taken, else how
        many slots the request is to take from the shared count, ``fetched`` to follow: a block,
        unless another thread is fetching one for the window (then its own slot alone, so threads
        that all found none do not each take a block). One decision under the lock, so no block
        is fetched while slots are still held: what the process holds stays under a block."""
        with self._lock:
            left = self._left.get(window, 0)
            if left > 0:
                self._left[window] = left - 1
                return 0
            if block <= 1 or window in self._fetching:
                return 1
            self._fetching.add(window)
            return block

    def fetched(self, window: Hashable, *, block: int, count: int | None, rate: int) -> bool:
        """``block`` slots were added to the shared count, which is now ``count`` (None: the
        call failed, nothing was added): the slots of it within ``rate`` are this process's. The
        first is the request's (True); none means the window is used up (False)."""
        within = 0 if count is None else max(0, min(block, rate - (count - block)))
        with self._lock:
            if block > 1:
                self._fetching.discard(window)
            if within > 1:
                if len(self._left) >= _SIZE:  # mostly used-up blocks and past windows'
                    self._left = {key: left for key, left in self._left.items() if left > 0}
                    if len(self._left) >= _SIZE:
                        self._left.clear()
                self._left[window] = self._left.get(window, 0) + within - 1
        return within > 0

    def clear(self) -> None:
        with self._lock:
            self._left.clear()
            self._fetching.clear()

    def after_fork(self) -> None:
        self._lock = threading.Lock()
        self._left = {}
        self._fetching = set()


window_blocks = WindowBlocks()
if hasattr(os, "register_at_fork"):
    # gunicorn forks its workers: each starts holding nothing (blocks the parent held would be
    # handed out twice) with a lock of its own (one held at the fork would stay held).
    os.register_at_fork(after_in_child=window_blocks.after_fork)
