"""A process's hub of live inbox streams, on its own loop (no server, no Redis): what a stream
keeps while its reader is behind, and how the streams read again after a lost subscription."""

from __future__ import annotations

import asyncio

import pytest

from notifications.inbox import live
from notifications.inbox.live import MAX_TOLD, Hub, Told, resync_spread_seconds


def test_a_stream_behind_its_wake_ups_keeps_one_read_instead_of_every_wake_up() -> None:
    async def woken_many() -> list[Told | None]:
        waiter = live.Waiter(asyncio.get_running_loop())
        for n in range(MAX_TOLD * 10):
            waiter.wake(Told(n, [(n + 1, "counts", {})]))
        await asyncio.sleep(0)  # the wake-ups are delivered by the loop, as from another thread
        return waiter.told

    told = asyncio.run(woken_many())

    assert 0 < len(told) <= MAX_TOLD
    assert None in told  # what was collapsed is read from the database


def test_after_a_lost_subscription_the_streams_read_again_spread_out_not_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(live, "_redis_configured", lambda: False)
    streams = 400
    spread = resync_spread_seconds(streams)

    async def resync() -> list[float]:
        hub, loop = Hub(), asyncio.get_running_loop()
        waiters = [hub.subscribe(f"1:user-{n}") for n in range(streams)]
        started = loop.time()

        moments: list[float] = []
        for waiter in waiters:
            waiter.on_revoked = lambda: moments.append(loop.time() - started)
        hub.notify_all()
        deadline = started + spread + 5
        while len(moments) < streams and loop.time() < deadline:
            await asyncio.sleep(0.05)  # the loop runs the delayed wake-ups meanwhile
        return moments

    moments = sorted(asyncio.run(resync()))

    assert len(moments) == streams
    assert spread == 2.0
    assert moments[-1] <= spread + 0.5  # every stream reads again within the spread
    first_tenth = sum(1 for moment in moments if moment < spread / 10)
    assert first_tenth < streams / 4, f"{first_tenth} of {streams} read in the first tenth of the spread"
    assert moments[-1] - moments[0] > spread / 2
