"""Wake-ups of live inbox streams, within a process and between processes.

A wake-up names a user of a client and, when small enough, carries the change's events with the
id of the user's event before them (``Told``). A stream that last sent that id sends the events
as they came; any other stream (one that missed a wake-up, or got two out of order) reads the
events after its last id from the database (models.InboxEvent), where a user's events are
numbered in the order they committed. So a wake-up lost, doubled or late loses or doubles nothing,
and the usual one costs no query. Between processes (a worker delivers, a web process streams)
wake-ups go through one Redis pub/sub channel that each streaming process subscribes to once; on
the embedded default (no Redis) they stay in the one process.

A wake-up can also say a user's tokens, or all the tokens of a client (rotated or revoked), were
revoked: each stream it reaches checks its own token (api/inbox/stream_guard.py), even one whose
reader has stopped reading; a client's says before when, so its streams need no query to decide. What a stream was told waits in a list of at most MAX_TOLD entries;
past that they collapse to one "read the database" (a reader that does not keep up costs a read,
not memory). After a lost subscription every stream reads again, spread over RESYNC_SPREAD.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import random
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from ..connections import redis_client, redis_key_prefix, redis_pubsub_client

logger = logging.getLogger("notifications.inbox")

# After a lost Redis subscription, the first retry waits this long, doubling up to the cap.
RESUBSCRIBE_BASE_SECONDS = 0.5
RESUBSCRIBE_CAP_SECONDS = 10.0
# A wake-up whose events would make a longer message carries none (its streams read them).
MAX_MESSAGE_BYTES = 16 * 1024
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
# Later than any token's issue (epoch ms): a revoked client's streams all end.
EVERY_TOKEN_MS = 2**53
# Wake-ups a stream keeps while it is busy (sending, or blocked on a reader that does not read);
# past them it reads the database once instead.
MAX_TOLD = 64
# After a lost subscription the streams read again at most this many a second, and within at
# most RESYNC_SPREAD_MAX_SECONDS: 2,000 streams spread over 10 s rather than 2,000 reads at once.
RESYNC_READS_PER_SECOND = 200.0
RESYNC_SPREAD_MAX_SECONDS = 30.0


@dataclass(frozen=True)
class Told:
    """A change's events as (id, type, data), and the id of the user's event before them."""

    previous: int = 0
    events: list[tuple[int, str, Any]] = field(default_factory=list)


def user_key(client_id: Any, user_id: str) -> str:
    return f"{client_id}:{user_id}"


def resync_spread_seconds(streams: int) -> float:
    """Over how long the streams of a process read again after a lost subscription."""
    return min(RESYNC_SPREAD_MAX_SECONDS, streams / RESYNC_READS_PER_SECOND)


def pubsub_channel() -> str:
    return f"{redis_key_prefix()}:inbox:wake"


class Waiter:
    """One stream's wake-up: set from any thread, awaited on the stream's event loop."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.event = asyncio.Event()
        # Called on the loop with a wake-up that says the user's (or the client's) tokens were
        # revoked, whether or not the stream is sending: with the moment (epoch ms) before which
        # the client's tokens are refused when the wake-up says it (a client rotated or revoked:
        # the guard decides without a query), else None (the guard checks its token).
        self.on_revoked: Callable[[int | None], None] | None = None
        # What the wake-ups since the stream last looked carried (None: one that carried nothing).
        self.told: list[Told | None] = []

    def wake(self, told: Told | None = None, *, revoked: bool = False, delay: float = 0.0) -> None:
        with contextlib.suppress(RuntimeError):  # its loop has closed: the stream is gone
            if delay > 0:
                self.loop.call_soon_threadsafe(self.loop.call_later, delay, self._woken, told, revoked)
            else:
                self.loop.call_soon_threadsafe(self._woken, told, revoked)

    def revoke(self, *, issued_before: int) -> None:
        """The stream's client refuses its tokens issued before ``issued_before`` (epoch ms)."""
        with contextlib.suppress(RuntimeError):
            self.loop.call_soon_threadsafe(self._revoked, issued_before)

    def _revoked(self, issued_before: int | None) -> None:
        if self.on_revoked is not None:
            self.on_revoked(issued_before)

    def _woken(self, told: Told | None, revoked: bool) -> None:
        if revoked:
            self._revoked(None)
        if len(self.told) >= MAX_TOLD:
            self.told = [None]  # the reader is behind: one read catches it up
        else:
            self.told.append(told)
        self.event.set()


class Hub:
    """The streams of this process by user, and its one Redis subscription (started with the first stream)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._waiters: dict[str, set[Waiter]] = {}
        self._listener: asyncio.Task[None] | None = None
        self.subscribed = threading.Event()

    def subscribe(self, key: str) -> Waiter:
        loop = asyncio.get_running_loop()
        waiter = Waiter(loop)
        with self._lock:
            self._waiters.setdefault(key, set()).add(waiter)
        self._listen_on(loop)
        return waiter

    def unsubscribe(self, key: str, waiter: Waiter) -> None:
        with self._lock:
            waiters = self._waiters.get(key)
            if waiters is not None:
                waiters.discard(waiter)
                if not waiters:
                    del self._waiters[key]

    def connections(self) -> int:
        with self._lock:
            return sum(len(waiters) for waiters in self._waiters.values())

    def notify(self, key: str, told: Told | None = None, *, revoked: bool = False) -> None:
        with self._lock:
            waiters = list(self._waiters.get(key, ()))
        for waiter in waiters:
            waiter.wake(told, revoked=revoked)

    def notify_client(self, client_id: Any, *, issued_before: int) -> None:
        """Every stream of the client's users whose token was issued before ``issued_before``
        (epoch ms) ends: the client was rotated or revoked then."""
        prefix = user_key(client_id, "")
        with self._lock:
            waiters = [waiter for key, group in self._waiters.items() if key.startswith(prefix) for waiter in group]
        for waiter in waiters:
            waiter.revoke(issued_before=issued_before)

    def notify_all(self) -> None:
        """Every stream reads again and checks its token (after an outage a revocation may have
        been missed too), spread out at random so that the database is not read by all at once."""
        with self._lock:
            waiters = [waiter for group in self._waiters.values() for waiter in group]
        spread = resync_spread_seconds(len(waiters))
        for waiter in waiters:
            waiter.wake(revoked=True, delay=random.uniform(0, spread))

    def _notify_message(self, data: Any) -> None:
        try:
            body = json.loads(data)
            if "c" in body:
                self.notify_client(body["c"], issued_before=int(body["b"]))
                return
            told = Told(int(body["p"]), [tuple(event) for event in body["e"]]) if "e" in body else None
            self.notify(str(body["k"]), told, revoked=bool(body.get("r")))
        except (ValueError, KeyError, TypeError):
            logger.warning("an inbox wake-up that is not one was ignored")

    def _listen_on(self, loop: asyncio.AbstractEventLoop) -> None:
        listener = self._listener
        if listener is not None and not listener.done() and listener.get_loop() is loop:
            return
        if not _redis_configured():
            return
        self._listener = loop.create_task(self._listen(), name="inbox-wake-listener")

    async def _listen(self) -> None:
        """Follow the Redis channel for as long as the loop runs, subscribing again after a loss."""
        delay = RESUBSCRIBE_BASE_SECONDS
        while True:
            client: Any = redis_pubsub_client()
            try:
                async with client.pubsub() as pubsub:
                    await pubsub.subscribe(pubsub_channel())
                    self.subscribed.set()
                    delay = RESUBSCRIBE_BASE_SECONDS
                    # What was published before this subscription (or during an outage) is read now.
                    self.notify_all()
                    async for message in pubsub.listen():
                        if message.get("type") == "message":
                            self._notify_message(message["data"])
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                self.subscribed.clear()
                logger.warning("inbox wake-up subscription lost (%s); again in %.1fs", exc.__class__.__name__, delay)
                await asyncio.sleep(delay)
                delay = min(delay * 2, RESUBSCRIBE_CAP_SECONDS)
            finally:
                await client.aclose()


def _redis_configured() -> bool:
    return redis_client() is not None


hub = Hub()


def wake(*, client_id: Any, user_id: str, told: Told | None = None, revoked: bool = False) -> None:
    """Wake the streams of a user, in every process; called after the change has committed, with
    what it told (``told``). ``revoked``: the user's tokens were revoked, so each stream checks
    its own."""
    key = user_key(client_id, user_id)
    redis = redis_client()
    if redis is None:
        hub.notify(key, told, revoked=revoked)
        return
    body: dict[str, Any] = {"k": key, "r": 1} if revoked else {"k": key}
    message = json.dumps(body if told is None else {**body, "p": told.previous, "e": told.events}, separators=(",", ":"))
    if len(message) > MAX_MESSAGE_BYTES:
        message = json.dumps(body, separators=(",", ":"))
    try:
        redis.publish(pubsub_channel(), message)
    except Exception as exc:  # the change is committed: a stream finds it at its next wake-up
        logger.warning("inbox wake-up not published (%s)", exc.__class__.__name__)
        hub.notify(key, told, revoked=revoked)


def epoch_ms(moment: datetime) -> int:
    """Whole milliseconds since the epoch, as inbox tokens carry them (integer arithmetic: a
    float's rounding would move a token across a revocation's millisecond)."""
    return (moment - EPOCH) // timedelta(milliseconds=1)


def wake_client(*, client_id: Any, issued_before: datetime | None) -> None:
    """End every stream of the client's users whose token was issued before ``issued_before``
    (None: every one), in every process: the client was rotated (or revoked) then. Called after
    that change has committed."""
    issued_before_ms = EVERY_TOKEN_MS if issued_before is None else epoch_ms(issued_before)
    redis = redis_client()
    if redis is None:
        hub.notify_client(client_id, issued_before=issued_before_ms)
        return
    try:
        redis.publish(pubsub_channel(), json.dumps({"c": client_id, "b": issued_before_ms}))
    except Exception as exc:  # Redis is down: every stream checks its token once it is subscribed again
        logger.warning("inbox client revocation not published (%s)", exc.__class__.__name__)
        hub.notify_client(client_id, issued_before=issued_before_ms)
