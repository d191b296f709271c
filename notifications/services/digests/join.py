"""Joining a digest at accept: the request's digest checked, the open digest of its key found or
opened (one per client, user and key), the member counted in it, and its close scheduled."""

from __future__ import annotations

import dataclasses
import logging
import uuid
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Protocol, TypeVar

from django.db import transaction
from django.db.models import F

from ...errors import NotificationError, ValidationFailed
from ...models import (
    Digest,
    DigestStatus,
    Notification,
    Status,
)
from ...sql import insert_rows_or_nothing
from .close import digest_close_after_commit, digest_close_schedule, digest_render_data

logger = logging.getLogger("notifications.services")

MAX_DIGEST_KEY_LENGTH = 100
MAX_DIGEST_WINDOW_SECONDS = 24 * 3600
MAX_DIGEST_ITEMS = 1000
DEFAULT_DIGEST_MAX_ITEMS = 100
# An accept finds the open digest closed under it at most a few times in a row (each time a closer
# or an expired window took it); past this something else is wrong.
MAX_JOIN_ATTEMPTS = 10


@dataclass(frozen=True)
class DigestRequest:
    """``digest`` of POST /notifications: gather by ``key`` for ``window_seconds``, at most ``max_items``."""

    key: str
    window_seconds: int
    max_items: int = DEFAULT_DIGEST_MAX_ITEMS


class _Requested(Protocol):
    """What this module reads of a NotificationRequest (services/intake/accept.py, which imports this one)."""

    @property
    def digest(self) -> DigestRequest | None: ...
    @property
    def data(self) -> dict[str, Any]: ...
    @property
    def template(self) -> str: ...
    @property
    def subject(self) -> str: ...
    @property
    def locale(self) -> str: ...
    @property
    def send_at(self) -> datetime | None: ...


R = TypeVar("R", bound=_Requested)


def digest_request_check(
    digest: DigestRequest, *, template: str, send_at: datetime | None, channels: tuple[str, ...] = ()
) -> None:
    """ValidationFailed naming the field when ``digest`` cannot be honoured: its limits, and a
    request it cannot go with (a message without template, ``send_at``, a fallback route)."""
    if not isinstance(digest.key, str) or not 1 <= len(digest.key) <= MAX_DIGEST_KEY_LENGTH:
        raise ValidationFailed(f"digest.key is 1 to {MAX_DIGEST_KEY_LENGTH} characters", extra={"field": "digest.key"})
    for name, maximum in (("window_seconds", MAX_DIGEST_WINDOW_SECONDS), ("max_items", MAX_DIGEST_ITEMS)):
        value = getattr(digest, name)
        if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= maximum:
            raise ValidationFailed(f"digest.{name} is a whole number from 1 to {maximum}", extra={"field": f"digest.{name}"})
    if not template:
        raise ValidationFailed(
            "a digest is sent rendered from a template with items and count: give template, with data for each item",
            extra={"field": "template"},
        )
    if send_at is not None:
        raise ValidationFailed("a digest is sent when its window ends; leave send_at out", extra={"field": "send_at"})
    if channels:
        raise ValidationFailed("a digest is sent on one channel; give channel, not channels", extra={"field": "channels"})


def digest_member_request(request: R) -> R:
    """The request a digest member is built from: checked, and its template rendered as a digest
    of this one item (the member's message shows that, and a template that cannot render a digest
    is refused now, naming the field, rather than at the close). Other requests are as given."""
    if request.digest is None:
        return request
    digest_request_check(
        request.digest, template=request.template, send_at=request.send_at, channels=getattr(request, "channels", ())
    )
    return dataclasses.replace(request, data=digest_render_data([request.data]))  # type: ignore[type-var]


def digest_member_mark(*, notification: Notification, request: _Requested) -> None:
    """Make a built notification a digest member (``digested``, not enqueued, its ``data`` kept for
    the items) when it asks for a digest and would be sent; one its recipient's preferences
    suppress is suppressed as usual and joins nothing."""
    if request.digest is None or notification.status != Status.ACCEPTED:
        return
    notification.status = Status.DIGESTED
    notification.digest_data = request.data
    notification.next_attempt_at = None
    notification.enqueued_at = None


def digest_join(*, notification: Notification, request: _Requested, now: datetime) -> None:
    """Join a member to its key's open digest, opening one if there is none, inside the accept's
    transaction (which must be open): sets ``notification.digest_id``. A digest that reaches
    ``max_items``, or whose window has ended, is marked closing and closed right after the commit;
    a new one gets its close message. Members keep the window and max_items of the request that
    opened their digest."""
    digest = request.digest
    if digest is None or notification.status != Status.DIGESTED:
        return
    for _ in range(MAX_JOIN_ATTEMPTS):
        opened_id = _digest_open(notification=notification, request=request, digest=digest, now=now)
        row = (
            Digest.objects.select_for_update()
            .filter(client_id=notification.client_id, user_id=notification.user_id, key=digest.key, status=DigestStatus.OPEN)
            .only("id", "closes_at", "item_count", "max_items")
            .first()
        )
        if row is None:
            continue  # a closer took it between our insert and our lock: open the next one
        if row.closes_at <= now:
            # Its window is over and its closer has not run yet: this request starts the next one.
            Digest.objects.filter(pk=row.pk).update(status=DigestStatus.CLOSING, updated_at=now)
            digest_close_after_commit(row.pk)
            continue
        break
    else:  # pragma: no cover - needs a closer to win every one of MAX_JOIN_ATTEMPTS races
        raise NotificationError("could not join the digest; retry", code="digest_busy")
    full = row.item_count + 1 >= row.max_items
    Digest.objects.filter(pk=row.pk).update(
        item_count=F("item_count") + 1, updated_at=now, **({"status": DigestStatus.CLOSING} if full else {})
    )
    notification.digest_id = row.pk
    if full:
        digest_close_after_commit(row.pk)
    elif opened_id == row.pk:
        delay = (row.closes_at - now).total_seconds()
        transaction.on_commit(lambda: digest_close_schedule(digest_id=row.pk, delay_seconds=delay))


def _digest_open(*, notification: Notification, request: _Requested, digest: DigestRequest, now: datetime) -> Any:
    """``INSERT ... ON CONFLICT DO NOTHING`` of a new open digest: its id when it went in, None
    when the key has an open one (a concurrent insert waits for the other transaction to end)."""
    values = {
        "id": uuid.uuid4(),
        "client_id": notification.client_id,
        "user_id": notification.user_id,
        "key": digest.key,
        "status": DigestStatus.OPEN,
        "opened_at": now,
        "closes_at": now + timedelta(seconds=digest.window_seconds),
        "max_items": digest.max_items,
        "item_count": 0,
        "channel": notification.channel,
        "address": notification.address,
        "template_key": notification.template_key,
        # As the request gave them: the digest's notification is rendered again at the close.
        "locale": request.locale,
        "subject": request.subject,
        "priority": notification.priority,
        "metadata": notification.metadata,
        "category_id": notification.category_id,
        "failure_reason": "",
        "updated_at": now,
    }
    # No conflict target: the one unique index that can conflict is the partial one, which
    # ON CONFLICT (columns) would have to name with its WHERE clause.
    inserted = insert_rows_or_nothing(Digest, [values], conflict_fields=(), returning="id")
    return next(iter(inserted), None)


def digest_refused_in_batch(digest: DigestRequest | None) -> None:
    """A batch item may not ask for a digest: a batch is written in one multi-row INSERT, and
    joining digests takes a row lock per key; each such request goes on its own."""
    if digest is not None:
        raise ValidationFailed(
            "digest is not taken in a batch; POST a notification with a digest to /api/v1/notifications",
            extra={"field": "digest"},
        )
