"""What a web process keeps between requests so that a known client's request needs no Redis call.

Every request of a known token used to make one Redis round trip: read its address's failures,
count the client's request. Through redis-py that round trip cost about a tenth of an accept's
web CPU (profiled under ``make bench``). Two things now spare it on most requests:

- **Blocks of a client's window.** A process takes the client's window slots from the shared
  count in blocks (one INCRBY of ``block_for(rate)``) and hands them out itself. The shared count
  includes every slot handed to any process, so the web tier together never lets more than the
  rate through. What a process holds and has not used yet is refused to the others until the
  window ends: at most ``block - 1`` per process and client (one block is fetched at a time; the
  requests that find it in flight count one slot each), kept under 0.5 % of the rate, and none at
  all below 400 requests a window, where a block is one slot and counting is exact.
- **Addresses recently under their failure limit.** A known token's address is checked against
  its failed authentications at most once per ``ADDRESS_RECHECK_SECONDS``. A failure this
  process counts for the address drops its check at once (and a check under way when it is
  counted does not stand); one counted by another process is seen within those seconds.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Hashable

ADDRESS_RECHECK_SECONDS = 1.0
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

    def take(self, window: Hashable) -> bool:
        """One held slot of ``window``, if this process has one left."""
        with self._lock:
            left = self._left.get(window, 0)
            if left <= 0:
                return False
            self._left[window] = left - 1
            return True

    def give_back(self, window: Hashable) -> None:
        """A slot taken with ``take`` that its request did not use."""
        with self._lock:
            self._left[window] = self._left.get(window, 0) + 1

    def block_to_fetch(self, window: Hashable, block: int) -> int:
        """How many slots a request that found none held takes from the shared count: a block,
        unless another thread is fetching one for the window (then its own slot alone, so
        threads that all found none do not each take a block). ``fetched`` must follow."""
        with self._lock:
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


class AddressChecks:
    """Addresses found under their failed-authentication limit, and when."""

    def __init__(self) -> None:
        self._checked: dict[Hashable, float] = {}
        self._failures: dict[Hashable, int] = {}  # failures this process counted, by address

    def fresh(self, address: Hashable) -> bool:
        checked = self._checked.get(address)
        return checked is not None and time.monotonic() - checked < ADDRESS_RECHECK_SECONDS

    def failures_seen(self, address: Hashable) -> int:
        """A mark for ``mark``: read before the check is made."""
        return self._failures.get(address, 0)

    def mark(self, address: Hashable, *, failures_seen: int) -> None:
        """The address was found under its limit by a check begun when ``failures_seen`` was
        read; a failure this process counted since then makes the check stale already."""
        if self._failures.get(address, 0) != failures_seen:
            return
        if len(self._checked) >= _SIZE:
            self._checked.clear()
        self._checked[address] = time.monotonic()

    def forget(self, address: Hashable) -> None:
        """A failure is being counted for the address: its check no longer stands."""
        if len(self._failures) >= _SIZE:
            self._failures.clear()
        self._failures[address] = self._failures.get(address, 0) + 1
        self._checked.pop(address, None)

    def clear(self) -> None:
        self._checked.clear()
        self._failures.clear()


window_blocks = WindowBlocks()
address_checks = AddressChecks()
