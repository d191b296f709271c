"""The guard of one live stream: ends it from outside its body when its token expires or is
revoked (the user's, or its client rotated or revoked), or when its reader has not taken an event
for INBOX_STREAM_SEND_TIMEOUT_SECONDS; gives its slot back (inbox/slots.py), whose lease a task of
the process renews for all its streams at once.

The body of a stream (stream_events.py) is an async generator: while its reader does not read,
the server's send blocks at the transport's write buffer and the generator waits at its
``yield``, where nothing inside it can run. So the guard acts from the loop's callbacks: a timer at
the token's expiry, one per event sent (the send timeout), and the stream's revocation wake-ups,
each of which checks the token in a short task. No task is held per stream. A stream waiting for
a wake-up is ended by waking it (it returns, and EventSource's reconnect is answered 401); one
blocked on its reader is aborted: its connection is dropped by the server (``abort``, given by
platform/asgi.py from the server's transport), or, on a server that gives none, the task sending
it is cancelled.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any

from ...inbox.live import Waiter, hub
from ...inbox.slots import RENEW_EVERY_SECONDS, StreamSlot, stream_slots_renew
from ...services.inbox import InboxUser, inbox_user_holds
from .threads import in_thread

logger = logging.getLogger("notifications.inbox")

# How long a stream asked to end may take to end by itself before its connection is dropped.
END_GRACE_SECONDS = 1.0
# How long a stream's body may take to start once its guard exists. A response lost before its
# body ran (its reader left while Django's middleware was still answering: the response is never
# closed) would otherwise hold its slot and subscription for the process's life.
START_SECONDS = 30.0
# The scope key under which platform/asgi.py gives a stream the means to drop its connection.
ABORT_SCOPE_KEY = "notifications.abort"

# Guards' own short tasks, held until they finish (the loop keeps only weak references).
_running: set[asyncio.Task[Any]] = set()
# The task renewing the process's slot leases, by loop.
_renewers: dict[asyncio.AbstractEventLoop, asyncio.Task[None]] = {}


class StreamGuard:
    # One per open stream: slots keep it small (the bench's memory per stream).
    __slots__ = (
        "user",
        "key",
        "waiter",
        "slot",
        "abort",
        "send_timeout",
        "loop",
        "closed",
        "finished",
        "_ended",
        "_task",
        "_stalled",
        "_expiry",
    )

    def __init__(
        self,
        *,
        user: InboxUser,
        key: str,
        waiter: Waiter,
        slot: StreamSlot,
        abort: Callable[[], None] | None,
        send_timeout: float,
    ) -> None:
        self.user, self.key, self.waiter, self.slot, self.abort = user, key, waiter, slot, abort
        self.send_timeout = send_timeout
        self.loop = asyncio.get_running_loop()
        self.closed = ""  # why the guard ended the stream ("" while it has not)
        self.finished = False  # the stream's body has ended
        self._ended: asyncio.Future[None] | None = None  # made only for a close that waits on the end
        self._task: asyncio.Task[Any] | None = None
        self._stalled: asyncio.TimerHandle | None = None
        # Until the body starts: the end of a stream that never started; then the token's expiry.
        self._expiry: asyncio.TimerHandle | None = self.loop.call_later(START_SECONDS, self._never_started)

    def _never_started(self) -> None:
        if self._task is None and not self.finished:
            logger.info("inbox stream never started", extra={"client_id": self.user.client.pk})
            self.finish()

    def start(self) -> None:
        """At the body's first step, in the task that sends the stream."""
        self._task = asyncio.current_task()
        if self._expiry is not None:
            self._expiry.cancel()
        left = self.user.expires_at.timestamp() - time.time()
        self._expiry = self.loop.call_later(max(0.0, left), self.close, "expired")
        self.waiter.on_revoked = self.revoked
        # A revocation between the token's check and the subscription was not heard: check once.
        self.revoked(None)
        _renew_leases_on(self.loop)

    def revoked(self, issued_before: int | None) -> None:
        """A wake-up said the user's tokens were revoked (check this stream's: one query), or the
        client's issued before ``issued_before`` (epoch ms; 10,000 streams of a rotated client
        decide at once, with no query each)."""
        if self.closed or self.finished:
            return
        if issued_before is None:
            _spawn(self._check_token())
        elif self.user.issued_ms < issued_before:
            self.close("revoked")

    async def _check_token(self) -> None:
        if not await in_thread(inbox_user_holds)(user=self.user):
            self.close("revoked")

    def sending(self) -> None:
        """The body yields an event: the server's send follows; past the timeout, the reader is stalled."""
        self._stalled = asyncio.get_running_loop().call_later(self.send_timeout, self.close, "stalled")

    def sent(self) -> None:
        if self._stalled is not None:
            self._stalled.cancel()
            self._stalled = None

    def close(self, reason: str) -> None:
        """End the stream now (from any task on its loop); its slot is given back at once."""
        if self.closed or self.finished:
            return
        self.closed = reason
        logger.info(
            "inbox stream closed: %s",
            reason,
            extra={"client_id": self.user.client.pk, "reason": reason, "blocked": self._stalled is not None},
        )
        self.waiter.event.set()  # a body waiting for a wake-up returns
        _spawn(self._end(blocked=self._stalled is not None))

    def finish(self) -> None:
        """The body has ended (by itself, or closed), or the response was closed before its body
        ran: stop watching and give the slot back."""
        if self.finished:
            return
        self.sent()
        self.finished = True
        if self._ended is not None and not self._ended.done():
            self._ended.set_result(None)
        if self._expiry is not None:
            self._expiry.cancel()
        self.waiter.on_revoked = None
        hub.unsubscribe(self.key, self.waiter)
        if not self.slot.released:
            _spawn(in_thread(self.slot.release)())

    def finish_threadsafe(self) -> None:
        with contextlib.suppress(RuntimeError):  # the loop has closed: so has the process's count
            self.loop.call_soon_threadsafe(self.finish)

    async def _end(self, *, blocked: bool) -> None:
        if not blocked:
            try:
                self._ended = self.loop.create_future()
                if not self.finished:
                    await asyncio.wait_for(self._ended, timeout=END_GRACE_SECONDS)
            except TimeoutError:
                blocked = True
        if blocked:
            if self.abort is not None:
                self.abort()
            elif self._task is not None:
                self._task.cancel()
        # Given back now, not when the server gets round to the body's end.
        hub.unsubscribe(self.key, self.waiter)
        if not self.slot.released:
            await in_thread(self.slot.release)()


def _renew_leases_on(loop: asyncio.AbstractEventLoop) -> None:
    renewer = _renewers.get(loop)
    if renewer is None or renewer.done():
        _renewers[loop] = loop.create_task(_renew_leases(), name="inbox-slot-leases")


async def _renew_leases() -> None:
    """Renew the leases of this process's streams every RENEW_EVERY_SECONDS, for as long as the loop runs."""
    while True:
        await asyncio.sleep(RENEW_EVERY_SECONDS)
        try:
            await in_thread(stream_slots_renew)()
        except Exception:  # the leases run out later, not now: the next round tries again
            logger.exception("inbox stream leases not renewed")


async def stream_slot_taken(taking: Awaitable[StreamSlot | None]) -> StreamSlot | None:
    """The slot ``taking`` (a take run in a thread) gives. If the reader leaves meanwhile (the
    view's task cancelled), the take still finishes in its thread: its slot is given back then."""
    task = asyncio.ensure_future(taking)
    try:
        return await asyncio.shield(task)
    except asyncio.CancelledError:
        task.add_done_callback(_give_back)
        raise


def _give_back(task: asyncio.Future[StreamSlot | None]) -> None:
    if not task.cancelled() and task.exception() is None:
        slot = task.result()
        if slot is not None and not slot.released:
            _spawn(in_thread(slot.release)())


def _spawn(work: Any) -> asyncio.Task[None]:
    task = asyncio.get_running_loop().create_task(work)
    _running.add(task)
    task.add_done_callback(_running.discard)
    return task
