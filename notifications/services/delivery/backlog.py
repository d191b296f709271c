"""Workers batch whatever backlog they find: the claim of a message's ids also takes other due
notifications of its queue (models/backlog.py), so single accepts waiting in a queue are sent and
recorded fifty at a time, and the messages that named them then find nothing of their own: no
statement when the claim noted its rows in Redis before the message came (backlog_claims_note), one
read else. While its process is sending backlog rows such a message's thread helps with the backlog
and waits for its last chunks (backlog_sending, services/delivery/send.py) rather than take the next.

The claim comes before these rows' consent check and rate-limit slots (it is what picks them), so
both follow it: a row that may not go now is given back and then held or suppressed as usual, and
a row without a slot is given back and comes back with the message in hand. A channel whose slots
ran short takes no backlog for a while, so a claim never takes many rows only to give them back.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections import Counter, OrderedDict
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from django.core.cache import cache
from django.db import connection
from django.utils import timezone

from ... import metrics
from ...channels import channel_spec
from ...channels.providers import provider_account
from ...conf import get_config
from ...connections import redis_client
from ...degraded import RedisOutage
from ...models import BacklogClaim, Claim, Notification
from ...ratelimit import reserve_send_slot
from ...selectors import notifications_pending_delivery
from .outcomes import DeliveryOutcome
from .withhold import consent_before_send, consent_withholds

# A row due this long and still pending is a backlog: its message is behind others in the queue (or
# was lost). One due more recently has its message on the way; taking it would only leave that
# message nothing to do and send the row outside its own message's consumer span.
BACKLOG_AFTER_SECONDS = 1.0

# What a message's queue takes beside its ids: the high queue its own priority; the bulk queue the
# high priority first, then its own, so a claim never sends bulk while high is due.
QUEUE_PRIORITIES = {"high": ("high",), "bulk": ("high", "bulk")}

# channel -> time.monotonic() before which this process takes no backlog of it (its slots ran short).
_paused_until: dict[str, float] = {}

# A backlog claim's rows, each with the claim's time, kept this long in one Redis sorted set shared
# by every worker: a message published before its rows' claim has nothing left to do, and learns it
# without reading PostgreSQL (backlog_claimed). Past this its message reads its rows, as without Redis.
CLAIMS_KEPT_SECONDS = 120.0
# A message is only checked against the claims when it waited longer than a backlog row must
# have (BACKLOG_AFTER_SECONDS): one that comes promptly makes no Redis round trip. And a claim
# covers a message only when it came this much after the publish: the clocks of the publishing
# and claiming hosts may differ by this much, and a message published just after the claim (a
# retry, a message coming back) must never be taken for one the claim covered.
CLAIM_AFTER_PUBLISH_SECONDS = 0.5
_claims_outage = RedisOutage("backlog_claims", consequence="each message of a backlog reads its rows")
# This process's own notes, the last LOCAL_CLAIMS_KEPT of them (id -> claim time, epoch ms): a
# message whose rows this process claimed learns it without the Redis round trip.
LOCAL_CLAIMS_KEPT = 20_000
_local_claims: OrderedDict[str, float] = OrderedDict()
_local_claims_lock = threading.Lock()


# (channel, queue) -> the backlog chunks this process is sending now, each a token (backlog_sending),
# and a condition its threads wait on for them to end (backlog_sent_wait).
_sending: dict[tuple[str, str], set[object]] = {}
_sending_changed = threading.Condition()


@contextlib.contextmanager
def backlog_sending(channel: str, queue: str) -> Iterator[None]:
    """While a thread sends and records backlog rows of ``channel`` it claimed for a message of ``queue``."""
    token = object()
    with _sending_changed:
        _sending.setdefault((channel, queue), set()).add(token)
    try:
        yield
    finally:
        with _sending_changed:
            chunks = _sending[(channel, queue)]
            chunks.discard(token)
            if not chunks:
                del _sending[(channel, queue)]
            _sending_changed.notify_all()


def backlog_sending_channel(queue: str) -> str | None:
    """A channel whose backlog this process is sending now for messages of ``queue``, or None."""
    with _sending_changed:
        return next((channel for channel, of_queue in _sending if of_queue == queue), None)


def backlog_sent_wait(channel: str, queue: str, *, timeout: float) -> None:
    """Wait until the backlog chunks of ``channel`` this process is sending now (for ``queue``) are
    sent and recorded; not for those begun meanwhile, and at most ``timeout`` seconds."""
    with _sending_changed:
        waited_for = set(_sending.get((channel, queue), ()))
        _sending_changed.wait_for(lambda: not waited_for & _sending.get((channel, queue), set()), timeout=timeout)


def _claims_key() -> str:
    return cache.make_key("backlog:claimed")


def backlog_claims_note(notifications: list[Notification], *, claimed_at: datetime) -> None:
    """Note rows a backlog claim took at ``claimed_at`` (no message of the claim named them), for
    the messages that named them (backlog_claimed). Best effort: without a note they read their rows."""
    client = redis_client()
    if client is None or not notifications:
        return
    now_ms = claimed_at.timestamp() * 1000
    with _local_claims_lock:
        for notification in notifications:
            _local_claims[str(notification.pk)] = now_ms
            _local_claims.move_to_end(str(notification.pk))
        while len(_local_claims) > LOCAL_CLAIMS_KEPT:
            _local_claims.popitem(last=False)

    def note() -> None:
        pipe = client.pipeline(transaction=False)
        pipe.zadd(_claims_key(), {str(notification.pk): now_ms for notification in notifications})
        pipe.zremrangebyscore(_claims_key(), "-inf", now_ms - CLAIMS_KEPT_SECONDS * 1000)
        pipe.pexpire(_claims_key(), int(CLAIMS_KEPT_SECONDS * 1000))
        pipe.execute()

    _claims_outage.call(note, fallback=lambda: None, counted=False)


def backlog_claims_forget(ids: list[str]) -> None:
    """Take back the notes of rows given back unsent: their own messages deliver them."""
    client = redis_client()
    if client is None or not ids:
        return
    with _local_claims_lock:
        for pk in ids:
            _local_claims.pop(pk, None)
    _claims_outage.call(lambda: client.zrem(_claims_key(), *ids), fallback=lambda: None, counted=False)


def backlog_claimed(ids: list[str], *, published_ms: float | None) -> set[str]:
    """Those of ``ids`` (a message's, published at ``published_ms``, epoch ms) that a backlog claim
    took after the message was published: the claim answers for them (it sends them, or gives them
    back with its own message or to the sweeper), so the message has nothing to do for them."""
    if published_ms is None or time.time() * 1000 - published_ms < BACKLOG_AFTER_SECONDS * 1000:
        return set()
    if connection.vendor != "postgresql":
        return set()  # no backlog claims there (backlog_claim_for), so no notes
    client = redis_client()
    if client is None:
        return set()
    covered_from = published_ms + CLAIM_AFTER_PUBLISH_SECONDS * 1000
    with _local_claims_lock:
        covered = {pk for pk in ids if _local_claims.get(pk, 0.0) >= covered_from}
    unknown = [pk for pk in ids if pk not in covered]
    if not unknown:
        return covered

    def read() -> set[str]:
        scores = client.zmscore(_claims_key(), unknown)
        return {pk for pk, score in zip(unknown, scores, strict=True) if score is not None and score >= covered_from}

    return covered | _claims_outage.call(read, fallback=set, counted=False)


def backlog_claim_for(*, channel: str, priority: str | None, own: int, size: int) -> BacklogClaim | None:
    """What a claim of ``own`` ids of ``channel``, from the queue of ``priority``, takes beside
    them: up to ``size`` rows in all (about a chunk's worth of sends, delivery.CHUNK_SECONDS).
    None: only its own ids, as on SQLite, which has no ``FOR UPDATE SKIP LOCKED`` to step around
    rows another claim holds (the embedded default has one process, and its in-process queue
    has no backlog behind a broker's prefetch to speak of)."""
    if priority is None or connection.vendor != "postgresql":
        return None
    room = min(size, get_config().delivery_batch_size) - own
    if room <= 0 or time.monotonic() < _paused_until.get(channel, 0.0):
        return None
    return BacklogClaim(
        channel=channel,
        priorities=QUEUE_PRIORITIES.get(priority, (priority,)),
        limit=room,
        due_before=timezone.now() - timedelta(seconds=BACKLOG_AFTER_SECONDS),
    )


def backlog_order(claims: list[Claim], *, priorities: tuple[str, ...]) -> list[Claim]:
    """A backlog claim's rows in the order they are sent: by priority, then in turns by client,
    oldest due first (as the claim ranked them)."""
    rank = {priority: index for index, priority in enumerate(priorities)}
    turns: Counter[tuple[int, Any]] = Counter()
    keyed = []
    for claim in sorted(
        claims, key=lambda c: (c.notification.next_attempt_at or c.notification.created_at, str(c.notification.pk))
    ):
        notification = claim.notification
        priority = rank.get(notification.priority, len(rank))
        turns[(priority, notification.client_id)] += 1
        keyed.append(((priority, turns[(priority, notification.client_id)]), claim))
    keyed.sort(key=lambda pair: pair[0])  # stable: oldest due first within a turn
    return [claim for _, claim in keyed]


@dataclass
class Admitted:
    """The backlog rows of a claim that may be sent, each with its slot (when its reservation was
    made, how long after it the slot is); those given back, and when to come back for them."""

    slots: dict[str, tuple[float, float]] = field(default_factory=dict)
    given_back: list[str] = field(default_factory=list)
    wait: float = 0.0


def backlog_admit(
    *,
    channel: str,
    claimed: list[Claim],
    claimed_at: datetime,
    outcomes: dict[str, DeliveryOutcome],
) -> Admitted:
    """Consent and send slots for the backlog rows of a claim, which no message of theirs checked:
    one read of what their consent depends on now; those withheld given back and held or
    suppressed (their outcomes in ``outcomes``); the others' slots reserved by client, each
    client's share (ratelimit.py); those without one given back."""
    admitted = Admitted()
    ids = [str(claim.notification.pk) for claim in claimed]
    pending, now = notifications_pending_delivery(ids, claimed=True), timezone.now()
    withheld = [pk for pk in ids if pk in pending and consent_withholds(pending=pending[pk], now=now)]
    if withheld:
        Notification.claims_release(withheld, claimed_at=claimed_at)
        for pk in withheld:
            outcome = consent_before_send(notification_id=pk, pending=pending[pk], now=now)
            if outcome is None:  # its recipient's preferences changed back meanwhile: it goes later
                admitted.given_back.append(pk)
            else:
                outcomes[pk] = outcome
    by_client: dict[Any, list[str]] = {}
    for claim in claimed:
        if str(claim.notification.pk) not in withheld:
            by_client.setdefault(claim.notification.client_id, []).append(str(claim.notification.pk))
    short: list[str] = []
    for client_id, client_ids in by_client.items():
        reservation = reserve_send_slot(
            channel_spec(channel).rate_limit_bucket,
            account=provider_account(channel),
            count=len(client_ids),
            holder=str(client_id),
        )
        reserved_at = time.monotonic()
        slots = reservation.slots if reservation.reserved else 0
        for index, pk in enumerate(client_ids[:slots]):
            admitted.slots[pk] = (reserved_at, reservation.slot_wait(index))
        if slots < len(client_ids):
            short += client_ids[slots:]
            admitted.wait = max(admitted.wait, reservation.slot_wait(slots) - 1.0 if slots else reservation.wait_seconds, 0.001)
    if short:
        metrics.record_rate_limited(channel=channel)
        Notification.claims_release(short, claimed_at=claimed_at)
        admitted.given_back += short
        _paused_until[channel] = time.monotonic() + max(admitted.wait, BACKLOG_AFTER_SECONDS)
    return admitted
