"""A process's hub of live inbox streams, on its own loop (no server, no Redis): what a stream
keeps while its reader is behind, how the streams read again after a lost subscription, and the
caps on open streams as the embedded default counts them (in the process)."""

from __future__ import annotations

import asyncio
import threading
from datetime import timedelta

import pytest
from django.test import override_settings
from django.utils import timezone

from notifications.concurrency import LocalTurns
from notifications.inbox import live, slots
from notifications.inbox.live import MAX_TOLD, Hub, Told, resync_spread_seconds
from notifications.models import ApiClient


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
    monkeypatch.setattr(slots, "CLIENT_SHARE", 1.0)  # the caps below, not a client's share of the process

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


def _local_slots(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(slots, "redis_client", lambda: None)
    monkeypatch.setattr(slots, "_local", LocalTurns())
    monkeypatch.setattr(slots, "process_streams", slots._ProcessCount())


def test_a_slot_taken_while_its_reader_left_is_given_back_when_the_take_finishes(monkeypatch: pytest.MonkeyPatch) -> None:
    from notifications.api.inbox.stream_guard import stream_slot_taken

    _local_slots(monkeypatch)
    taking, took = threading.Event(), threading.Event()
    release_take = threading.Event()

    def slow_take() -> slots.StreamSlot | None:
        taking.set()
        assert release_take.wait(timeout=10)
        slot = slots.stream_slot_take(client_id=1, user_id="ann")
        took.set()
        return slot

    async def reader_leaves() -> None:
        view = asyncio.ensure_future(stream_slot_taken(asyncio.to_thread(slow_take)))
        await asyncio.to_thread(taking.wait, 10)
        view.cancel()  # Django cancels the view's task when the client disconnects
        with pytest.raises(asyncio.CancelledError):
            await view
        release_take.set()  # the take in its thread still finishes, and takes a slot
        await asyncio.to_thread(took.wait, 10)
        deadline = asyncio.get_running_loop().time() + 10
        while slots.process_streams.held and asyncio.get_running_loop().time() < deadline:
            await asyncio.sleep(0.01)

    asyncio.run(reader_leaves())

    assert slots.process_streams.held == 0


def test_a_stream_whose_body_never_starts_gives_its_slot_and_subscription_back(monkeypatch: pytest.MonkeyPatch) -> None:
    from notifications.api.inbox import stream_guard
    from notifications.services.inbox import InboxUser

    _local_slots(monkeypatch)
    monkeypatch.setattr(stream_guard, "START_SECONDS", 0.05)
    now = timezone.now()
    user = InboxUser(client=ApiClient(pk=1, name="acme"), user_id="ann", expires_at=now + timedelta(hours=1), issued_at=now)

    async def response_lost() -> tuple[bool, int]:
        hub = live.hub
        slot = slots.stream_slot_take(client_id=1, user_id="ann")
        assert slot is not None
        waiter = hub.subscribe("1:ann")
        stream_guard.StreamGuard(user=user, key="1:ann", waiter=waiter, slot=slot, abort=None, send_timeout=30)
        # The response is lost before its body runs: nothing calls start() or close().
        deadline = asyncio.get_running_loop().time() + 10
        while not slot.released and asyncio.get_running_loop().time() < deadline:
            await asyncio.sleep(0.01)
        return slot.released, len(hub._waiters.get("1:ann", ()))

    released, subscribed = asyncio.run(response_lost())

    assert released and subscribed == 0
    assert slots.process_streams.held == 0


@override_settings(NOTIFICATIONS={"INBOX_STREAMS_PER_USER": 5, "INBOX_STREAMS_PER_CLIENT": 100, "INBOX_STREAMS_PER_PROCESS": 4})
def test_one_client_holds_at_most_half_of_a_process_streams_whatever_its_users(monkeypatch: pytest.MonkeyPatch) -> None:
    _local_slots(monkeypatch)

    flood = [slots.stream_slot_take(client_id=1, user_id=f"user-{n}") for n in range(4)]
    others = [slots.stream_slot_take(client_id=2, user_id=f"user-{n}") for n in range(2)]

    assert [slot is not None for slot in flood] == [True, True, False, False]
    assert [slot is not None for slot in others] == [True, True]
    held = [slot for slot in flood if slot is not None]
    held[0].release()
    assert slots.stream_slot_take(client_id=1, user_id="user-9") is not None
