"""Channel fallback: a notification's ordered route of channels, tried one after another until one delivers.

A route is a list of entries ``{channel, outcome, reason, content}`` on the notification (empty
for a notification on one channel, which none of this touches). ``outcome`` is ``pending``,
``skipped`` (no address, an opt-out or a suppressed address: no attempt), ``failed`` (a permanent
error, or its attempts ran out) or ``delivered``. ``content`` is what that channel sends, rendered
at accept (a template has a variant per channel; only email carries List-Unsubscribe), so moving
on to the next channel, or starting again on a redrive, renders nothing.

The notification's own ``channel``, ``address`` and message columns are always those of the
entry being tried; moving on rewrites them in the same conditional UPDATE that moves the route,
so two workers can never both advance it.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.db import transaction
from django.db.models import Case, JSONField, Value, When
from django.utils import timezone

from ...channels import recipient_address, validate_address
from ...errors import ValidationFailed
from ...models import ApiClient, Category, Notification, Recipient, Status, SuppressedReason
from ...selectors import addresses_suppressed_reasons
from ..records.outbox import notification_publish
from .content import NotificationContent
from .preferences import suppressed_reason

logger = logging.getLogger("notifications.services")

PENDING = "pending"
SKIPPED = "skipped"
FAILED = "failed"
DELIVERED = "delivered"
ROUTE_OUTCOMES = (PENDING, SKIPPED, FAILED, DELIVERED)

# The notification columns an entry's content fills in when its channel is the one being tried.
CONTENT_FIELDS = ("subject", "message", "html_message", "headers", "template_key", "locale")


def route_with_outcome(
    route: list[dict[str, Any]], channel: str, outcome: str, reason: str = "", *, attempts: int | None = None
) -> list[dict[str, Any]]:
    """A copy of ``route`` whose entry for ``channel`` now has ``outcome`` and ``reason`` (a route
    lists a channel once), and ``attempts`` (how many that channel took) when given; the same
    list back for a notification without a route."""
    if not route:
        return route
    decided = {"outcome": outcome, "reason": reason, **({} if attempts is None else {"attempts": attempts})}
    return [{**entry, **decided} if entry["channel"] == channel else dict(entry) for entry in route]


def route_attempts_spent(route: list[dict[str, Any]]) -> int:
    """The attempts the channels already left behind took. A notification's ``attempt_count``
    counts every attempt of its route; what is left of it is the current channel's, whose retry
    budget is its own."""
    return sum(int(entry.get("attempts", 0)) for entry in route if entry["outcome"] != PENDING)


def channel_attempt_count(notification: Notification) -> int:
    """The attempts made on the notification's current channel (all of them without a route)."""
    return max(0, notification.attempt_count - route_attempts_spent(notification.route or []))


def content_entry(content: NotificationContent) -> dict[str, Any]:
    return {name: getattr(content, name) for name in CONTENT_FIELDS}


@dataclass(frozen=True)
class Hop:
    """Whether ``channel`` of a route can be tried for a recipient now: its address, or why it is skipped."""

    channel: str
    address: str = ""
    skipped_reason: str = ""


def route_hops(
    *, client_id: Any, channels: list[str], recipient: Recipient | None, category: Category | None, user_id: str = ""
) -> list[Hop]:
    """Check channels of a route, in order, against the recipient as stored now: an address (a
    stored one that no longer validates counts as none), the preferences for the category, and
    the suppression list, read in one query for all of them."""
    hops: list[Hop] = []
    for channel in channels:
        stored = recipient_address(recipient, channel, user_id=user_id)
        try:
            address = validate_address(channel, stored) if stored else ""
        except ValidationFailed:
            address = ""
        reason = SuppressedReason.NO_ADDRESS if not address else ""
        if not reason and category is not None:
            reason = suppressed_reason(category=category, channel=channel, preferences=recipient.preferences if recipient else {})
        hops.append(Hop(channel, skipped_reason=reason) if reason else Hop(channel, address=address))
    suppressed = addresses_suppressed_reasons(
        client_id=client_id, addresses=[(hop.channel, hop.address) for hop in hops if hop.address]
    )
    return [
        Hop(hop.channel, skipped_reason=suppressed[(hop.channel, hop.address)])
        if (hop.channel, hop.address) in suppressed
        else hop
        for hop in hops
    ]


@dataclass(frozen=True)
class RoutePlan:
    """Where a route starts: its entries, and the first channel that can be tried (None: all skipped)."""

    route: list[dict[str, Any]]
    first: Hop | None

    @property
    def suppressed_reason(self) -> str:
        """When every channel was skipped: the reason of the first, the one the client preferred."""
        return "" if self.first is not None or not self.route else str(self.route[0]["reason"])[:16]


def route_plan(
    *,
    client: ApiClient,
    recipient: Recipient | None,
    category: Category | None,
    contents: dict[str, NotificationContent],
    user_id: str = "",
) -> RoutePlan:
    """The route of a new notification over ``contents``' channels, in their order: each channel
    skipped or pending, and the first pending one to try."""
    hops = route_hops(client_id=client.pk, channels=list(contents), recipient=recipient, category=category, user_id=user_id)
    return route_planned(hops, contents)


def route_planned(hops: Sequence[Hop], contents: dict[str, NotificationContent]) -> RoutePlan:
    """The route of checked ``hops`` (route_hops) with each channel's content: each entry skipped
    or pending, and the first pending one to try."""
    route: list[dict[str, Any]] = []
    first: Hop | None = None
    for hop, content in zip(hops, contents.values(), strict=True):
        if first is None and not hop.skipped_reason:
            first = hop
        outcome = SKIPPED if hop.skipped_reason else PENDING
        route.append(
            {"channel": hop.channel, "outcome": outcome, "reason": hop.skipped_reason, "content": content_entry(content)}
        )
    return RoutePlan(route, first)


def _next_hop(notification: Notification, route: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], Hop | None]:
    """After the entries already decided: check the pending ones in order against the recipient as
    stored now, marking the ones to skip, until one can be tried. One read of the recipient, of
    its category and of the suppression list, and only for a fallback notification that has a
    pending entry left."""
    if not any(entry["outcome"] == PENDING for entry in route):
        return route, None
    recipient = Recipient.objects.filter(client_id=notification.client_id, user_id=notification.user_id).first()
    category = Category.objects.filter(pk=notification.category_id).first() if notification.category_id else None
    route = [dict(entry) for entry in route]
    pending = [entry for entry in route if entry["outcome"] == PENDING]
    hops = route_hops(
        client_id=notification.client_id,
        channels=[entry["channel"] for entry in pending],
        recipient=recipient,
        category=category,
        user_id=notification.user_id,
    )
    for entry, hop in zip(pending, hops, strict=True):
        if not hop.skipped_reason:
            return route, hop
        entry.update(outcome=SKIPPED, reason=hop.skipped_reason)
    return route, None


def _fields_for(hop: Hop, route: list[dict[str, Any]]) -> dict[str, Any]:
    [entry] = [entry for entry in route if entry["channel"] == hop.channel]
    return {"channel": hop.channel, "address": hop.address, "route": route, **entry.get("content", {})}


@dataclass(frozen=True)
class RouteStep:
    """What became of a fallback notification's failed channel.

    ``advanced``: the next channel is queued (nothing else to do). Otherwise ``route`` is the route
    to write with the notification's final status (empty for a notification without a route), and
    ``lost`` says another worker's claim is current and nothing may be written at all."""

    advanced: bool = False
    lost: bool = False
    route: list[dict[str, Any]] | None = None


def route_fields(step: RouteStep) -> dict[str, Any]:
    """What to write with a fallback notification's final status: its route ({} without one)."""
    return {"route": step.route} if step.route else {}


def route_advance(
    notification: Notification, *, claimed_at: datetime | None, reason: str, error: str, only_from: list[str] | None = None
) -> RouteStep:
    """The notification's current channel has failed (``reason``: permanent_error, retries_exhausted)
    or was skipped just before its send (``only_from`` pending statuses, a preference changed):
    move on to its next channel that can be tried, with a fresh attempt budget (the route records
    the attempts the failed channel took; ``attempt_count`` goes on counting), in one conditional
    UPDATE (only out of the claim made at ``claimed_at``, or out of ``only_from``), published after
    commit. Run inside the caller's transaction."""
    if not notification.route:
        return RouteStep(route=[])
    outcome = SKIPPED if only_from is not None else FAILED
    attempts = channel_attempt_count(notification)
    route, hop = _next_hop(
        notification, route_with_outcome(notification.route, notification.channel, outcome, reason, attempts=attempts)
    )
    if hop is None:
        return RouteStep(route=route)
    now = timezone.now()
    fields = _fields_for(hop, route)
    moved = Notification.transition(
        notification.pk,
        Status.QUEUED,
        only_from=only_from or [Status.SENDING],
        only_claimed_at=claimed_at,
        next_attempt_at=now,
        enqueued_at=now,
        claimed_at=None,
        last_error=error[:4000],
        **fields,
    )
    if not moved:
        return RouteStep(lost=True)
    for name, value in fields.items():
        setattr(notification, name, value)
    notification.enqueued_at = now
    transaction.on_commit(lambda: notification_publish(notification=notification, delay_seconds=0))
    logger.info(
        "notification %s falls back from %s to %s (%s)",
        notification.pk,
        route_failed_channel(route, hop.channel),
        hop.channel,
        reason,
        extra={"notification_id": str(notification.pk)},
    )
    return RouteStep(advanced=True, route=route)


def route_failed_channel(route: list[dict[str, Any]], next_channel: str) -> str:
    """The channel decided just before ``next_channel`` (for the log line)."""
    earlier = [entry["channel"] for entry in route[: [e["channel"] for e in route].index(next_channel)]]
    return earlier[-1] if earlier else "-"


def route_restart(notification_id: Any) -> dict[str, Any] | None:
    """The fields that start a fallback notification's route again from its first channel (a
    redrive): every entry pending again, checked against the recipient as stored now. None when
    no channel of it can be tried now; an empty dict for a notification without a route."""
    notification = (
        Notification.objects.filter(pk=notification_id).only("id", "client_id", "user_id", "category_id", "route").first()
    )
    if notification is None or not notification.route:
        return {}
    fresh = [{**entry, "outcome": PENDING, "reason": "", "attempts": 0} for entry in notification.route]
    route, hop = _next_hop(notification, fresh)
    return None if hop is None else _fields_for(hop, route)


def routes_delivered(notifications: list[Notification], *, delivered_at: datetime) -> int:
    """Mark the current channel delivered on the route of each fallback notification among
    ``notifications`` just recorded delivered at ``delivered_at``: one UPDATE for all of them, and
    none at all when none has a route (a notification on one channel costs nothing here)."""
    routed = [n for n in notifications if n.route]
    if not routed:
        return 0
    whens = [
        When(pk=n.pk, then=Value(route_with_outcome(n.route, n.channel, DELIVERED), output_field=JSONField())) for n in routed
    ]
    # Only rows this delivery finished: a claim the sweeper recovered meanwhile keeps its own route.
    return Notification.objects.filter(pk__in=[n.pk for n in routed], status=Status.DELIVERED, delivered_at=delivered_at).update(
        route=Case(*whens, output_field=JSONField())
    )
