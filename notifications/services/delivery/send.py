"""Delivering notifications: take send slots, claim the rows, call the provider, record.

One notification or a batch (a message carries the ids enqueued together, services/records/outbox.py)
go the same way, in chunks: one query reads what consent needs, one ``UPDATE ... RETURNING``
(with the attempts' insert) claims a chunk, each notification is sent on its own (its own
attempt row, rate-limit slot and span), and one transaction records the chunk's deliveries
(outcomes.py). A failed send is recorded on its own at once: its retry or dead letter is its own.
A worker's message also claims the queue's backlog beside its ids (backlog.py).
"""

from __future__ import annotations

import contextlib
import time
from datetime import datetime, timedelta
from typing import Any, NamedTuple

from django.utils import timezone

from ... import metrics
from ...channels import channel_spec
from ...channels.providers import provider_account
from ...concurrency import TURN_WAIT_SECONDS, WebhookTurn, webhook_turn_take
from ...conf import get_config
from ...models import BacklogClaim, Claim, Notification
from ...ratelimit import Reservation, reserve_send_slot
from ...selectors import notifications_pending_delivery
from .backlog import (
    Admitted,
    backlog_admit,
    backlog_claim_for,
    backlog_claimed,
    backlog_claims_forget,
    backlog_claims_note,
    backlog_order,
    backlog_sending,
    backlog_sending_channel,
    backlog_sent_wait,
)
from .outcomes import DeliveryOutcome, Sent, deliveries_record
from .provider_call import notification_send
from .withhold import consent_before_send

# A batch is claimed a chunk at a time, sized so a chunk's sends take about this long: rows are
# not held in ``sending`` for long, and a slow provider (a webhook at its timeout) cannot keep a
# whole batch past the actor's time limit. The first chunk is small, the next ones follow the
# measured send time (the providers' calls alone: a claim or record waiting on a busy database
# says nothing about how long the next sends take).
CHUNK_SECONDS = 2.0
FIRST_CHUNK = 5
# Past this, what is left of a batch goes back on the queue (well inside the 120 s time limit).
BATCH_SECONDS = 60.0
# A thread goes on taking a backlog beside its message this long at most: another channel's
# message already prefetched by its process (a high SMS behind an email backlog) waits for a free
# thread no longer than a few chunks.
DRAIN_SECONDS = 3 * CHUNK_SECONDS
# channel -> seconds a send of it took lately in this process (its last chunk's): sizes the next
# chunk, and the backlog a claim takes.
_send_seconds: dict[str, float] = {}


class SendRateLimited(Exception):
    """The channel's shared rate limit says: not now. Not an attempt (a provider's 429 is one).
    ``notification_ids``: those of the message that found no slot, to come back with."""

    def __init__(self, retry_after: float, *, notification_ids: list[str] | None = None):
        super().__init__(f"rate limited; retry in {retry_after:.3f}s")
        self.retry_after = retry_after
        self.notification_ids = list(notification_ids or [])


def notification_deliver(*, notification_id: Any) -> DeliveryOutcome:
    """Deliver one notification if it is still pending and due: claim, send, record.

    Two short write transactions: the claim (on PostgreSQL one statement, the ``UPDATE ...
    RETURNING`` and the attempt's insert: models/claims.py) and the outcome (the attempt's and the
    notification's updates). Raises SendRateLimited
    when the channel has no free slot; the actor then puts its message back for that long without
    spending its retries (see actors). A wait longer than BROKER_DELAY_MAX_SECONDS is held in the
    row instead, for the sweeper, like any long wait.
    """
    return notifications_deliver(notification_ids=[notification_id])[str(notification_id)]


def notifications_deliver(
    *, notification_ids: list[Any], backlog_priority: str | None = None, published_ms: float | None = None
) -> dict[str, DeliveryOutcome]:
    """Deliver those of ``notification_ids`` still pending and due; their outcomes by id. Raises
    SendRateLimited, after everything else is recorded, with the ids that found no send slot.

    ``backlog_priority``: the priority of the queue the message came from (a worker's message).
    Its first claim then also takes other due notifications of that queue (services/backlog.py),
    whose outcomes are returned too, and which come back with these ids when they find no slot.
    ``published_ms``: when the message was published (epoch ms); the ids a backlog claim took
    since are left to that claim without a read (backlog.backlog_claimed)."""
    ids = list(dict.fromkeys(str(pk) for pk in notification_ids))
    outcomes = dict.fromkeys(ids, DeliveryOutcome("skipped"))
    helping = None
    if backlog_priority is not None:
        covered = backlog_claimed(ids, published_ms=published_ms)
        ids = [pk for pk in ids if pk not in covered]
        if not ids:
            # Nothing of its own: the thread helps this process's threads with the backlog they are
            # sending, then waits for their last chunks rather than take the next message. Each
            # message of a drained backlog is one such, and sixteen threads taking them one after
            # another while three sent the last rows slowed those sends by a fifth (bench/email_singles.py).
            helping = backlog_sending_channel(backlog_priority)
            if helping is None:
                return outcomes
    # The pending check also reads what consent depends on now, in the same one query.
    pending, now = notifications_pending_delivery(ids), timezone.now()
    # By channel and client: a client's sends reserve only its share of the channel's rate limit.
    by_channel: dict[tuple[str, Any], list[str]] = {}
    for pk in ids:
        found = pending.get(pk)
        if found is None:
            continue
        if found.next_attempt_at and found.next_attempt_at > now + timedelta(seconds=1):
            continue  # an early duplicate hint; the row's own schedule (and the sweeper) decides when
        # Suppressed (a preference changed since accept) or held (quiet hours began): no slot, no claim.
        withheld = consent_before_send(notification_id=pk, pending=found, now=now)
        if withheld is not None:
            outcomes[pk] = withheld
            continue
        by_channel.setdefault((found.channel, found.client_id), []).append(pk)
    come_back: list[str] = []
    retry_after = 0.0
    queue_priority, drain = backlog_priority, helping
    started = time.monotonic()
    own = sum(len(waiting) for waiting in by_channel.values())
    for (channel, client_id), waiting in by_channel.items():
        chunk = 1 if len(waiting) == 1 else FIRST_CHUNK
        while waiting:
            if time.monotonic() - started > BATCH_SECONDS:
                come_back += waiting
                retry_after = max(retry_after, 0.001)
                break
            taken, waiting = waiting[:chunk], waiting[chunk:]
            # The message's first claim takes the backlog beside its ids, up to a chunk's worth in all.
            backlog = backlog_claim_for(channel=channel, priority=backlog_priority, own=own, size=_paced_chunk(channel))
            backlog_priority = None
            done = _chunk_deliver(
                channel, taken, outcomes, deadline=started + BATCH_SECONDS, client_id=client_id, backlog=backlog
            )
            _pace_note(channel, done)
            back, wait = done.coming_back()
            come_back, retry_after = come_back + back, max(retry_after, wait)
            if done.left:
                come_back += waiting
                break
            if done.backlog_full:
                drain = channel
            chunk = _paced_chunk(channel)
    # A backlog bigger than a claim: this thread goes on taking it, a chunk at a time, while its
    # claims come back full. Otherwise only a message whose own row is still unclaimed takes more,
    # and the threads whose messages found their rows taken sit idle while a few send it all.
    drained = False  # a claim came back short: no backlog left to take, only chunks in flight
    while drain is not None and not come_back and time.monotonic() - started < DRAIN_SECONDS:
        backlog = backlog_claim_for(channel=drain, priority=queue_priority, own=0, size=_paced_chunk(drain))
        if backlog is None:
            break
        done = _chunk_deliver(drain, [], outcomes, deadline=started + BATCH_SECONDS, backlog=backlog)
        _pace_note(drain, done)
        back, wait = done.coming_back()
        come_back, retry_after = come_back + back, max(retry_after, wait)
        if not done.backlog_full:
            drained = True
            break
    if helping is not None and queue_priority is not None and drained and not come_back:
        # Only at a drain's end: while there is backlog to claim, a thread is better sending it.
        backlog_sent_wait(helping, queue_priority, timeout=CHUNK_SECONDS)
    if come_back and retry_after > get_config().broker_delay_max_seconds:
        # The next free slot is further away than a delayed message may wait (see _chunk_deliver).
        _hold(come_back, seconds=retry_after, outcomes=outcomes)
    elif come_back:
        raise SendRateLimited(retry_after, notification_ids=come_back)
    return outcomes


class _ChunkDone(NamedTuple):
    """What a chunk left: its ids that found no slot or no time (``left``) and when to come back
    (``wait``); those whose client had no webhook turn free (concurrency.py); the backlog rows
    given back without a slot; how many sends were tried; how many reached a provider, and the
    seconds the providers took."""

    left: list[str]
    wait: float
    turn_waiting: list[str]
    given_back: list[str]
    tried: int
    sends: int = 0
    send_seconds: float = 0.0
    backlog_full: bool = False  # its claim took as many backlog rows as it asked for: there may be more

    def coming_back(self) -> tuple[list[str], float]:
        """The ids that come back with the message in hand, and after how long: those whose client
        had no webhook turn free (in a moment, the rest go on), the backlog rows given back
        without a slot (their messages may be gone), those that found no slot or time."""
        wait = max(TURN_WAIT_SECONDS if self.turn_waiting else 0.0, self.wait if self.given_back or self.left else 0.0)
        return self.turn_waiting + self.given_back + self.left, wait


def _chunk_deliver(
    channel: str,
    ids: list[str],
    outcomes: dict[str, DeliveryOutcome],
    *,
    deadline: float,
    client_id: Any = None,
    backlog: BacklogClaim | None = None,
) -> _ChunkDone:
    """Slots, claim, sends and records of one chunk of a channel and client (and of the backlog
    rows its claim took beside it; no ids: the backlog alone). Every id not delivered or decided is
    given back unsent."""
    reservation = reserve_send_slot(
        channel_spec(channel).rate_limit_bucket,
        account=provider_account(channel),
        count=len(ids),
        holder="" if client_id is None else str(client_id),
    )
    if not reservation.reserved:
        metrics.record_rate_limited(channel=channel)
        if reservation.wait_seconds > get_config().broker_delay_max_seconds:
            # As a delayed message it would sit unacked in the worker that long, past RabbitMQ's
            # consumer timeout for a slow limit (10/m in tests/test_faults.py, 1/h in production):
            # the channel is closed and every unacked message on it comes back.
            _hold(ids, seconds=reservation.wait_seconds, outcomes=outcomes)
            return _ChunkDone([], 0.0, [], [], 0)
        return _ChunkDone(ids, reservation.wait_seconds, [], [], 0)
    slotted, left = ids[: reservation.slots], ids[reservation.slots :]
    reserved_at = time.monotonic()
    claimed = _notifications_claim(slotted, backlog=backlog if not left else None)
    # Each send's slot: when its reservation was made and how long after it the slot is.
    slots = {pk: (reserved_at, reservation.slot_wait(index)) for index, pk in enumerate(slotted)}
    admitted = Admitted()
    extras = [claim for claim in claimed if str(claim.notification.pk) not in slots]
    backlog_full = backlog is not None and not left and len(extras) >= backlog.limit
    if extras:
        claimed_at = extras[0].attempt.started_at
        admitted = backlog_admit(channel=channel, claimed=extras, claimed_at=claimed_at, outcomes=outcomes)
        # Noted for their messages only once admitted (sent by this thread): a row given back has
        # its message deliver it, whatever then becomes of this one.
        backlog_claims_note([c.notification for c in extras if str(c.notification.pk) in admitted.slots], claimed_at=claimed_at)
        slots.update(admitted.slots)
        claimed = [claim for claim in claimed if str(claim.notification.pk) in slots]
        # The claim's slots, earliest first, go to its rows in the claim's order (priority, turns, due).
        earliest = sorted((slots[str(c.notification.pk)] for c in claimed), key=sum)
        slots = {str(c.notification.pk): slot for c, slot in zip(claimed, earliest, strict=True)}
    # No send starts on a claim the sweeper could take back (SENDING_TIMEOUT_SECONDS) before the
    # send's deadline has passed: it would be sent twice.
    config = get_config()
    last_start = min(deadline, time.monotonic() + config.sending_timeout_seconds - config.send_deadline_seconds)
    sent: list[Sent] = []
    turn_waiting: list[Notification] = []
    tried, sends, send_seconds = 0, 0, 0.0
    # Backlog rows in hand: this process's threads whose messages find nothing help, then wait for
    # them (above); not for a client endpoint's, whose sends wait on one client's endpoint and turns.
    shared = not channel_spec(channel).client_endpoint
    queue = backlog.priorities[-1] if backlog is not None and extras and shared else None
    with backlog_sending(channel, queue) if queue else contextlib.nullcontext():
        try:
            for claim in claimed:
                notification = claim.notification
                if time.monotonic() > last_start:
                    break  # a slow provider: what is left goes back rather than past the time limit
                slot_reserved_at, slot_wait = slots[str(notification.pk)]
                pause = slot_reserved_at + slot_wait - time.monotonic()
                if pause > 0:
                    time.sleep(pause)
                tried += 1
                turn = _client_turn(notification)
                if turn is None:
                    turn_waiting.append(notification)
                    continue
                send_started = time.monotonic()
                try:
                    result = notification_send(claim)
                finally:
                    sends, send_seconds = sends + 1, send_seconds + time.monotonic() - send_started
                    if isinstance(turn, WebhookTurn):
                        turn.release()
                if isinstance(result, Sent):
                    sent.append(result)
                else:
                    outcomes[str(notification.pk)] = result
        finally:
            # Whatever ended the loop (the deadline, an error, the actor's time limit), the sends the
            # provider took are recorded and the claims never tried are given back, not left in
            # ``sending`` for the sweeper to count as interrupted attempts.
            outcomes.update(deliveries_record(sent))
            untried = [claim.notification for claim in claimed[tried:]]
            if untried or turn_waiting:
                Notification.claims_release([n.pk for n in untried + turn_waiting], claimed_at=claimed[0].attempt.started_at)
                # Their messages deliver them, should this thread not come back with them (an error).
                backlog_claims_forget([str(n.pk) for n in untried + turn_waiting])
    left = [str(n.pk) for n in untried] + left
    wait = max(_come_back_after(reservation, left), 0.001 if untried else 0.0, admitted.wait)
    return _ChunkDone(
        left, wait, [str(n.pk) for n in turn_waiting], admitted.given_back, tried, sends, send_seconds, backlog_full
    )


def _pace_note(channel: str, done: _ChunkDone) -> None:
    """The pace of ``channel`` lately in this process: its last chunk's providers' time a send."""
    if done.sends:
        _send_seconds[channel] = done.send_seconds / done.sends


def _paced_chunk(channel: str) -> int:
    """How many sends of ``channel`` take about CHUNK_SECONDS at its pace lately; FIRST_CHUNK
    before any was measured."""
    per_send = _send_seconds.get(channel)
    if per_send is None:
        return FIRST_CHUNK
    return max(1, min(get_config().delivery_batch_size, int(CHUNK_SECONDS / max(per_send, 1e-4))))


def _client_turn(notification: Notification) -> WebhookTurn | bool | None:
    """A client endpoint's turn (a webhook's, WEBHOOK_CONCURRENCY_PER_CLIENT), None when none is
    free; True for the other channels, whose providers are shared by every client and rate limited instead."""
    if not channel_spec(notification.channel).client_endpoint:
        return True
    return webhook_turn_take(client_id=notification.client_id)


def _hold(ids: list[str], *, seconds: float, outcomes: dict[str, DeliveryOutcome]) -> None:
    """Hold the notifications in PostgreSQL for ``seconds``, for the sweeper: a wait longer than a
    delayed message may take."""
    until = timezone.now() + timedelta(seconds=seconds)
    for pk in ids:
        Notification.hold(pk, until=until)
        outcomes[pk] = DeliveryOutcome("held")


def _come_back_after(reservation: Reservation, left: list[str]) -> float:
    # The slot after the reserved ones was further away than the one second a caller waits.
    return max(0.001, reservation.slot_wait(reservation.slots) - 1.0) if left else 0.0


def _notifications_claim(ids: list[str], *, backlog: BacklogClaim | None = None) -> list[Claim]:
    """Atomically take the notifications for this worker (and the ``backlog`` rows beside them);
    those another worker got are left out.

    A claim with a backlog steps over locked rows, its own ids' too (models/backlog.py). A row
    is locked for a moment by whoever last wrote it: the publisher marking it enqueued just after
    the publish this message came from, a cancel, another worker's claim. Stepped over, it would
    wait for the sweeper; so the ids found pending but not taken are claimed again, waiting for
    their locks this time, once this claim has committed and holds none (no deadlock). Rows another
    worker already sent were not pending when read, so their message never reaches a claim."""
    now = timezone.now()
    claimed = _claim(ids, now=now, backlog=backlog)
    if backlog is not None or len(ids) > 1:
        taken = {str(claim.notification.pk) for claim in claimed}
        stepped_over = [pk for pk in ids if pk not in taken]
        if stepped_over:
            claimed += _claim(stepped_over, now=now, wait=True)
    return claimed


def _claim(ids: list[str], *, now: datetime, backlog: BacklogClaim | None = None, wait: bool = False) -> list[Claim]:
    claims = Notification.claim_for_delivery(
        ids, now=now, webhook_secret_grace_seconds=get_config().webhook_secret_grace_seconds, backlog=backlog, wait=wait
    )
    # Sent in the order they were enqueued in, or the backlog's (RETURNING has none of its own).
    if backlog is not None:
        return backlog_order(claims, priorities=backlog.priorities)
    position = {pk: index for index, pk in enumerate(ids)}
    return sorted(claims, key=lambda claim: position[str(claim.notification.pk)])
