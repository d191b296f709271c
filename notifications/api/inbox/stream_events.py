"""The body of a live stream: a user's inbox events as server-sent events, from where the reader
left off, then as each change wakes it.

A wake-up that carries the events following the last id sent is sent as it is; any other reads
the user's events after that id from the database, where they are numbered in commit order
(inbox/live.py). So a reconnect with ``Last-Event-ID`` within the resume window
(INBOX_EVENT_RETENTION_SECONDS) gets exactly what it missed, nothing twice; one from an event no
longer kept is sent a ``reset`` (the page reloads its list), then what follows. Without
``Last-Event-ID`` the stream starts with the user's counts, under the id of their latest event.
Its guard (stream_guard.py) ends it from outside when its token no longer holds or its reader stalls.
"""

from __future__ import annotations

import asyncio
import json
import random
from collections.abc import AsyncIterator
from typing import Any

from ...inbox.live import Told
from ...models import InboxEvent
from ...selectors.inbox import inbox_counts_and_last_event, inbox_event_kept, inbox_events_after
from ...services.inbox import InboxUser
from .stream_guard import StreamGuard
from .threads import in_thread

# Events one read sends before it reads again (a long absence is caught up in pages).
READ_PAGE = 500
# What EventSource waits before it reconnects after the stream ends.
RETRY_MILLISECONDS = 2000
# A quiet stream reads the database about every this many heartbeats anyway (a wake-up whose
# publish failed is caught up within a minute), each stream at its own moment: the first read
# comes after a random share of the period, so streams opened together do not read together.
READ_EVERY_HEARTBEATS = 4


def event_text(event_id: int, event_type: str, data: dict[str, Any]) -> str:
    return f"id: {event_id}\nevent: {event_type}\ndata: {json.dumps(data, separators=(',', ':'))}\n\n"


def _start(user: InboxUser) -> tuple[int, dict[str, int]]:
    """Where a new stream starts: the user's latest event id, and their counts now (one row)."""
    counts, last = inbox_counts_and_last_event(client_id=user.client.pk, user_id=user.user_id)
    return last, counts.as_dict()


def _resume(user: InboxUser, after: int) -> tuple[int, dict[str, int]] | None:
    """None when a stream can resume after event ``after`` (it is the user's latest, or still
    kept); else where it starts again, as _start says, after a ``reset``."""
    last, counts = _start(user)
    if after == last or inbox_event_kept(client_id=user.client.pk, user_id=user.user_id, event_id=after):
        return None
    return last, counts


def told_events(told: list[Told | None], last: int) -> list[tuple[int, str, Any]] | None:
    """The events the wake-ups carried that follow ``last`` without a gap; None when one carried
    nothing or does not follow (then the stream reads the database)."""
    events: list[tuple[int, str, Any]] = []
    for change in told:
        if change is None or not change.events:
            return None
        if change.events[-1][0] <= last:
            continue  # sent already (a read caught it up)
        if change.previous != last:
            return None
        events += change.events
        last = change.events[-1][0]
    return events


def _read(user: InboxUser, after: int) -> list[InboxEvent]:
    return inbox_events_after(client_id=user.client.pk, user_id=user.user_id, after=after, limit=READ_PAGE)


async def stream_events(user: InboxUser, after: int | None, *, guard: StreamGuard, heartbeat: float) -> AsyncIterator[str]:
    waiter = guard.waiter
    guard.start()
    try:
        chunks = [f"retry: {RETRY_MILLISECONDS}\n\n"]
        if after is None:
            last, counts = await in_thread(_start)(user)
            chunks.append(event_text(last, "counts", counts))
        else:
            last = after
            restart = await in_thread(_resume)(user, after) if after else None
            if restart is not None:
                last = restart[0]
                chunks.append(event_text(last, "reset", restart[1]))
        guard.sending()
        yield "".join(chunks)
        guard.sent()
        read = True  # a new stream reads what came since its start
        beats = random.randrange(READ_EVERY_HEARTBEATS)
        first_beat = heartbeat * random.uniform(0.5, 1.0)
        while not guard.closed:
            waiter.event.clear()  # before the read: a wake-up during it is not lost
            told, waiter.told = waiter.told, []
            carried = None if read else told_events(told, last)
            if carried is not None:
                events = carried
            else:
                events = [(row.id, row.type, row.data) for row in await in_thread(_read)(user, last)]
            read = carried is None and len(events) == READ_PAGE
            for event_id, event_type, data in events:
                if guard.closed:
                    return
                guard.sending()
                yield event_text(event_id, event_type, data)
                guard.sent()
                last = event_id
            if read:
                continue
            try:
                await asyncio.wait_for(waiter.event.wait(), timeout=first_beat or heartbeat)
            except TimeoutError:
                if guard.closed:
                    return
                guard.sending()
                yield ": heartbeat\n\n"
                guard.sent()
                beats += 1
                read = beats % READ_EVERY_HEARTBEATS == 0
            first_beat = 0.0
    finally:
        guard.finish()
