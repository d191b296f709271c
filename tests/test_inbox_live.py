"""A process's hub of live inbox streams, on its own loop (no server, no Redis): what a stream
keeps while its reader is behind, how the streams read again after a lost subscription, and the
caps on open streams as the embedded default counts them (in the process)."""

from __future__ import annotations

import asyncio

import pytest
from django.test import override_settings

from notifications.concurrency import LocalTurns
from notifications.inbox import live, slots
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
            waiter.on_revoked = lambda issued_before: moments.append(loop.time() - started)
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


@override_settings(NOTIFICATIONS={"INBOX_STREAMS_PER_USER": 2, "INBOX_STREAMS_PER_CLIENT": 3, "INBOX_STREAMS_PER_PROCESS": 4})
def test_without_redis_the_process_counts_each_users_each_clients_and_its_own_streams(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(slots, "redis_client", lambda: None)
    monkeypatch.setattr(slots, "_local", LocalTurns())
    monkeypatch.setattr(slots, "process_streams", slots._ProcessCount())

    anns = [slots.stream_slot_take(client_id=1, user_id="ann") for _ in range(3)]
    bobs = [slots.stream_slot_take(client_id=1, user_id="bob") for _ in range(2)]
    other_client = [slots.stream_slot_take(client_id=2, user_id="cho") for _ in range(2)]

    assert [slot is not None for slot in anns] == [True, True, False]  # the user's 2
    assert [slot is not None for slot in bobs] == [True, False]  # the client's 3
    assert [slot is not None for slot in other_client] == [True, False]  # the process's 4
    held = [slot for slot in anns + bobs + other_client if slot is not None]
    held[0].release()
    held[0].release()  # given back once, however often
    assert slots.process_streams.held == 3
    assert slots.stream_slot_take(client_id=1, user_id="ann") is not None
