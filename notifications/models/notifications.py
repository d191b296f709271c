"""Notifications, their statuses and the transitions between them, and their delivery attempts."""

from __future__ import annotations

import contextlib
import uuid
from datetime import datetime
from typing import Any

from django.db import connection, models, transaction
from django.utils import timezone as django_timezone

from ..errors import InvalidTransition
from ..sql import CountInto, update_rows
from .attempts import AttemptOutcome, DeliveryAttempt
from .backlog import BacklogClaim
from .claims import Claim, claim_of_row, claim_statement
from .clients import ApiClient
from .content import Category, Channel
from .outcome_counts import OUTCOME_COUNT_KEY, OutcomeCount
from .rows import rows_with_models


class Priority(models.TextChoices):
    HIGH = "high"
    BULK = "bulk"


class Status(models.TextChoices):
    ACCEPTED = "accepted"
    QUEUED = "queued"
    SENDING = "sending"
    RETRYING = "retrying"
    DELIVERED = "delivered"
    FAILED = "failed"
    DEAD = "dead"
    CANCELLED = "cancelled"
    SUPPRESSED = "suppressed"
    # A digest's member: not sent on its own, but as one of its digest's items (models/digests.py).
    DIGESTED = "digested"


class SuppressedReason(models.TextChoices):
    """Why a notification was not sent: the recipient's preferences forbid its category or channel."""

    PREFERENCE = "preference"  # an opt-out in the recipient's preferences
    UNSUBSCRIBED = "unsubscribed"  # the recipient's one-click unsubscribe (RFC 8058)
    DEFAULT_OFF = "default_off"  # an opt-in category the recipient never opted into
    # A broadcast's subscriber with no (valid) address stored for the channel; or a fallback route
    # none of whose channels has an address for the recipient.
    NO_ADDRESS = "no_address"
    # The address is on the client's suppression list (models/suppressions.py), for the same reason.
    BOUNCED = "bounced"
    COMPLAINED = "complained"
    UNSUBSCRIBED_SMS = "unsubscribed_sms"
    UNREGISTERED = "unregistered"
    # Past its category's max_per_recipient (services/policy/caps.py).
    THROTTLED = "throttled"


class ProviderStatus(models.TextChoices):
    """What the provider reported after taking the message (its status callback or event webhook)."""

    SENT = "sent"
    DELIVERED = "delivered"
    UNDELIVERED = "undelivered"
    BOUNCED = "bounced"
    COMPLAINED = "complained"


# A provider status is only ever replaced by a later one in this order, so callbacks that arrive
# late, twice or out of order never move it back (delivered and undelivered are both final sends).
PROVIDER_STATUS_RANK: dict[str, int] = {
    "": 0,
    ProviderStatus.SENT: 1,
    ProviderStatus.DELIVERED: 2,
    ProviderStatus.UNDELIVERED: 2,
    ProviderStatus.BOUNCED: 3,
    ProviderStatus.COMPLAINED: 4,
}


# Every status change the platform may make, from -> allowed targets. A change is written with a
# conditional UPDATE ... WHERE status IN (sources), so two workers can never both make it.
# Suppressed is decided before a send: at accept, or at the claim when a preference changed since.
# Queued -> accepted is a send held back in PostgreSQL (Notification.hold, by delivery): to the end
# of the recipient's quiet hours, or past a rate-limit wait too long for a broker message; the
# sweeper enqueues it again when it is due.
TRANSITIONS: dict[str, frozenset[str]] = {
    Status.ACCEPTED: frozenset({Status.QUEUED, Status.SENDING, Status.CANCELLED, Status.SUPPRESSED}),
    Status.QUEUED: frozenset({Status.QUEUED, Status.SENDING, Status.CANCELLED, Status.SUPPRESSED, Status.ACCEPTED}),
    # Sending -> queued: a fallback route moving on to its next channel (services/policy/routing.py).
    Status.SENDING: frozenset({Status.DELIVERED, Status.RETRYING, Status.FAILED, Status.DEAD, Status.QUEUED}),
    Status.RETRYING: frozenset({Status.QUEUED, Status.SENDING, Status.CANCELLED, Status.DEAD, Status.SUPPRESSED}),
    Status.FAILED: frozenset({Status.QUEUED}),
    Status.DEAD: frozenset({Status.QUEUED}),
    Status.DELIVERED: frozenset(),
    Status.CANCELLED: frozenset(),
    Status.SUPPRESSED: frozenset(),
    # Only while its digest is not yet closed (services/digests/close.py holds the digest's lock for it).
    Status.DIGESTED: frozenset({Status.CANCELLED}),
}
FINISHED_STATUSES = frozenset({Status.DELIVERED, Status.FAILED, Status.DEAD, Status.CANCELLED, Status.SUPPRESSED})
PENDING_STATUSES = frozenset({Status.ACCEPTED, Status.QUEUED, Status.RETRYING})


def sources_of(target: str) -> list[str]:
    return sorted(source for source, targets in TRANSITIONS.items() if target in targets)


class Notification(models.Model):
    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    # No index of its own: notif_client_created and notif_client_user below lead with it. Every
    # index is written again by each of a send's two updates (claim, outcome), which change status.
    client = models.ForeignKey(ApiClient, on_delete=models.PROTECT, related_name="notifications", db_index=False)
    user_id = models.CharField(max_length=255)
    channel = models.CharField(max_length=16, choices=Channel.choices)
    address = models.CharField(max_length=2000, help_text="Where it is sent: email, phone, device token or URL.")
    subject = models.CharField(max_length=998, blank=True, default="")
    message = models.TextField()
    metadata = models.JSONField(default=dict, blank=True)
    priority = models.CharField(max_length=8, choices=Priority.choices, default=Priority.HIGH)
    send_at = models.DateTimeField(null=True, blank=True)
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.ACCEPTED)
    attempt_count = models.PositiveIntegerField(default=0)
    # When the next try is due: send_at, or now + backoff after a transient failure. The database,
    # not a delayed broker message, is what holds long waits (see services/records/outbox.py).
    next_attempt_at = models.DateTimeField(null=True, blank=True)
    enqueued_at = models.DateTimeField(null=True, blank=True)
    claimed_at = models.DateTimeField(null=True, blank=True)
    last_error = models.TextField(blank=True, default="")
    failure_reason = models.CharField(
        max_length=64,
        blank=True,
        default="",
        help_text="Why it failed or is dead: the error's code (and HTTP status), as the dashboard counts it; blank otherwise.",
    )
    provider_message_id = models.CharField(max_length=255, blank=True, default="")
    # Blank until the provider reports (services/feedback/provider_feedback.py).
    provider_status = models.CharField(
        max_length=16,
        choices=ProviderStatus.choices,
        blank=True,
        default="",
        help_text="What the provider reported after taking it (sent, delivered, undelivered, bounced, complained); blank until it reports.",
    )
    provider_status_at = models.DateTimeField(null=True, blank=True, help_text="When the provider status last changed.")
    trace_id = models.CharField(max_length=32, blank=True, default="")
    # The accept's W3C traceparent: a send claimed from the backlog, beside another notification's
    # message, goes in its own request's trace (tracing.delivery_context).
    traceparent = models.CharField(max_length=55, blank=True, default="")
    idempotency_key = models.CharField(max_length=255, blank=True, default="")
    created_at = models.DateTimeField(default=django_timezone.now, editable=False)
    updated_at = models.DateTimeField(auto_now=True)
    delivered_at = models.DateTimeField(null=True, blank=True)
    # Rendered at accept, so the row holds exactly what is sent (and a replay is the same).
    html_message = models.TextField(blank=True, default="", help_text="The HTML part of an email, when its template has one.")
    headers = models.JSONField(default=dict, blank=True, help_text="Extra email headers it is sent with (List-Unsubscribe).")
    template_key = models.CharField(max_length=100, blank=True, default="")
    locale = models.CharField(max_length=35, blank=True, default="", help_text="The locale of the template variant used.")
    # Null only for notifications accepted before categories existed. No index: categories are never deleted.
    category = models.ForeignKey(Category, null=True, blank=True, on_delete=models.PROTECT, related_name="+", db_index=False)
    suppressed_reason = models.CharField(max_length=16, choices=SuppressedReason.choices, blank=True, default="")
    # Set on the notifications a broadcast's fan-out made; indexed by the constraints below.
    broadcast = models.ForeignKey(
        "notifications.Broadcast", null=True, blank=True, on_delete=models.PROTECT, related_name="notifications", db_index=False
    )
    # A fallback notification's channels in order, each {channel, outcome, reason, content}; empty
    # for a notification on one channel (services/policy/routing.py).
    route = models.JSONField(default=list, blank=True)
    # A digest's member (status digested), or the one notification a digest was sent as; a member
    # keeps its template data for the digest's items (services/digests/close.py).
    digest = models.ForeignKey(
        "notifications.Digest", null=True, blank=True, on_delete=models.SET_NULL, related_name="notifications", db_index=False
    )
    digest_data = models.JSONField(null=True, blank=True)
    # In-app only (the in_app channel's inbox item, models/inbox.py): where the item links to, and
    # the conversation it groups under.
    action_url = models.CharField(max_length=2000, blank=True, default="")
    thread_key = models.CharField(max_length=255, blank=True, default="")

    class Meta:
        ordering = ["-created_at"]
        indexes = [
            # The admin's and the API's default order, and the date filter, on a large table.
            models.Index(fields=["created_at"], name="notif_created"),
            models.Index(fields=["status", "created_at"], name="notif_status_created"),
            models.Index(fields=["client", "-created_at"], name="notif_client_created"),
            models.Index(fields=["client", "user_id"], name="notif_client_user"),
            models.Index(fields=["user_id"], name="notif_user"),
            models.Index(fields=["status", "next_attempt_at"], name="notif_status_due"),
            models.Index(fields=["trace_id"], name="notif_trace"),
            models.Index(fields=["idempotency_key"], name="notif_idem_key"),
            # The admin's exact search ORs address with the other indexed columns: without this
            # one index the whole OR is a sequential scan (~150 ms a query at 1M rows).
            models.Index(fields=["address"], name="notif_address"),
            # A provider's status callback finds its notification by the provider's message id.
            models.Index(fields=["provider_message_id"], name="notif_provider_message"),
            # A broadcast's counts (one GROUP BY status) and cancel; partial: most rows have none.
            models.Index(
                fields=["broadcast", "status"], name="notif_broadcast_status", condition=models.Q(broadcast__isnull=False)
            ),
            # A digest's members, collected at its close; partial: most rows have none.
            models.Index(fields=["digest", "status"], name="notif_digest_status", condition=models.Q(digest__isnull=False)),
            # A backlog claim's probe of each client's oldest due rows of a channel and priority
            # (backlog.py); partial: only the pending rows, a small part of the table.
            models.Index(
                fields=["channel", "client", "priority", "next_attempt_at"],
                name="notif_pending_due",
                condition=models.Q(status__in=sorted(PENDING_STATUSES)),
            ),
        ]
        constraints = [
            # One notification per subscriber of a broadcast, whatever a resumed fan-out re-reads
            # (its inserts are ON CONFLICT DO NOTHING on it). NULLs are distinct: other rows never clash.
            models.UniqueConstraint(fields=["broadcast", "user_id"], name="notif_broadcast_user_unique"),
        ]

    def __str__(self) -> str:
        return f"{self.channel} to {self.address} ({self.status})"

    @classmethod
    def transition(
        cls,
        notification_id: Any,
        to: str,
        *,
        only_from: list[str] | None = None,
        only_claimed_at: datetime | None = None,
        **fields: Any,
    ) -> bool:
        """Move one notification to ``to`` if its current status allows it; True if this call won.

        ``only_from`` narrows the allowed sources further (e.g. a claim only from pending states).
        ``only_claimed_at`` ends one claim only: a send that finishes after the sweeper recovered it
        (and another worker maybe claimed it again) must not overwrite what they did.
        """
        sources = sources_of(to)
        if only_from is not None:
            unknown = set(only_from) - set(sources)
            if unknown:
                raise InvalidTransition(f"{sorted(unknown)} -> {to} is not a transition the platform makes")
            sources = list(only_from)
        current = cls.objects.filter(pk=notification_id, status__in=sources)
        if only_claimed_at is not None:
            current = current.filter(claimed_at=only_claimed_at)
        updated = current.update(status=to, updated_at=django_timezone.now(), **fields)
        return updated == 1

    @classmethod
    def hold(cls, notification_id: Any, *, until: datetime) -> bool:
        """Hold a pending notification until ``until`` (the end of its recipient's quiet hours): a
        queued one goes back to accepted with no message out, so the sweeper enqueues it then."""
        updated = cls.objects.filter(pk=notification_id, status__in=PENDING_STATUSES).update(
            status=models.Case(models.When(status=Status.QUEUED, then=models.Value(Status.ACCEPTED)), default=models.F("status")),
            next_attempt_at=until,
            enqueued_at=None,
            updated_at=django_timezone.now(),
        )
        return updated == 1

    @property
    def scheduled_for(self) -> datetime | None:
        """When it is due to be tried next, while it is pending (a hold, a backoff, ``send_at``)."""
        return self.next_attempt_at if self.status in PENDING_STATUSES else None

    @classmethod
    def claim_for_delivery(
        cls,
        notification_ids: list[Any],
        *,
        now: datetime,
        webhook_secret_grace_seconds: float = 0.0,
        backlog: BacklogClaim | None = None,
        wait: bool = False,
    ) -> list[Claim]:
        """Take pending notifications for one send each, in one ``UPDATE ... RETURNING``: status
        ``sending``, one more attempt, ``claimed_at = now``; those another worker won, or no longer
        pending, are not returned. Each comes back as a Claim (models/claims.py): the row whole,
        the client it was claimed under and its attempt, numbered after the notification's last
        (attempt numbers keep counting across redrives, which reset ``attempt_count``), so the send
        needs no read of its own. On PostgreSQL the same statement inserts the attempts
        (models/claims.py) and commits as it returns; elsewhere a second statement does, in the
        claim's transaction.

        Several ids on PostgreSQL lock with ``FOR UPDATE SKIP LOCKED``: a row another transaction
        holds (another worker's claim of a duplicate message, a cancel) is left to it, and two
        batches can never wait on each other. One id waits for the lock, then sees the outcome.
        With ``backlog`` (PostgreSQL only) the same statement also takes the rows it names
        (models/backlog.py), every row with SKIP LOCKED: a claim that waited for its own id while
        holding backlog rows could deadlock with the claim holding that id. ``wait``: several ids
        wait for their locks too (``FOR UPDATE`` in id order), for a caller holding no other lock."""
        one_statement = connection.vendor == "postgresql"
        sql, params = claim_statement(
            cls,
            notification_ids,
            pending=sorted(PENDING_STATUSES),  # each may move to sending (TRANSITIONS)
            sending=Status.SENDING,
            now=now,
            backlog=backlog,
            wait=wait,
            attempts=one_statement,
        )
        with transaction.atomic() if not one_statement else contextlib.nullcontext():
            rows = rows_with_models(cls, sql, params)
            claims = [
                claim_of_row(
                    notification,
                    columns,
                    now=now,
                    inserted=one_statement,
                    webhook_secret_grace_seconds=webhook_secret_grace_seconds,
                )
                for notification, columns in rows
            ]
            if claims and not one_statement:
                DeliveryAttempt.objects.bulk_create([claim.attempt for claim in claims])
        return claims

    @classmethod
    def claims_release(cls, notification_ids: list[Any], *, claimed_at: datetime) -> int:
        """Give back claims made at ``claimed_at`` whose send was never tried (a batch out of
        time): ``queued`` again, the attempt not counted and its row gone, as if never claimed.
        Returns how many; one the sweeper already recovered keeps its newer state."""
        with transaction.atomic():
            released = cls.objects.filter(pk__in=notification_ids, status=Status.SENDING, claimed_at=claimed_at).update(
                status=Status.QUEUED,
                claimed_at=None,
                attempt_count=models.F("attempt_count") - 1,
                enqueued_at=django_timezone.now(),  # the caller puts them back on the queue
                updated_at=django_timezone.now(),
            )
            DeliveryAttempt.objects.filter(
                notification_id__in=notification_ids, started_at=claimed_at, outcome=AttemptOutcome.IN_PROGRESS
            ).delete()
        return int(released)

    @classmethod
    def deliveries_finish(
        cls,
        provider_message_ids: dict[Any, str],
        *,
        claimed_at: datetime,
        delivered_at: datetime,
        counted: dict[Any, tuple[Any, ...]] | None = None,
    ) -> set[Any]:
        """Mark delivered, in one conditional UPDATE, the notifications of ``provider_message_ids``
        (id -> the provider's message id) still in the claim made at ``claimed_at``; returns the
        ids it marked. One whose claim the sweeper recovered meanwhile keeps its newer state.
        ``counted``: by id, the OutcomeCount key each one marked adds one to, in the same statement."""
        (source,) = sources_of(Status.DELIVERED)
        return update_rows(
            cls,
            {pk: {"provider_message_id": value[:255]} for pk, value in provider_message_ids.items()},
            same={
                "status": Status.DELIVERED,
                "delivered_at": delivered_at,
                "updated_at": django_timezone.now(),
                "last_error": "",
                "failure_reason": "",
            },
            where={"status": source, "claimed_at": claimed_at},
            count_into=CountInto(OutcomeCount, OUTCOME_COUNT_KEY, counted) if counted else None,
        )
