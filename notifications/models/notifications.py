"""Notifications, their statuses and the transitions between them, and their delivery attempts."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any

from django.db import connection, models
from django.utils import timezone as django_timezone

from ..errors import InvalidTransition
from .clients import ApiClient
from .content import Category, Channel


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


class SuppressedReason(models.TextChoices):
    """Why a notification was not sent: the recipient's preferences forbid its category or channel."""

    PREFERENCE = "preference"  # an opt-out in the recipient's preferences
    UNSUBSCRIBED = "unsubscribed"  # the recipient's one-click unsubscribe (RFC 8058)
    DEFAULT_OFF = "default_off"  # an opt-in category the recipient never opted into


# Every status change the platform may make, from -> allowed targets. A change is written with a
# conditional UPDATE ... WHERE status IN (sources), so two workers can never both make it.
# Suppressed is decided before a send: at accept, or at the claim when a preference changed since.
# Queued -> accepted is a send held back in PostgreSQL (Notification.hold, by delivery): to the end
# of the recipient's quiet hours, or past a rate-limit wait too long for a broker message; the
# sweeper enqueues it again when it is due.
TRANSITIONS: dict[str, frozenset[str]] = {
    Status.ACCEPTED: frozenset({Status.QUEUED, Status.SENDING, Status.CANCELLED, Status.SUPPRESSED}),
    Status.QUEUED: frozenset({Status.QUEUED, Status.SENDING, Status.CANCELLED, Status.SUPPRESSED, Status.ACCEPTED}),
    Status.SENDING: frozenset({Status.DELIVERED, Status.RETRYING, Status.FAILED, Status.DEAD}),
    Status.RETRYING: frozenset({Status.QUEUED, Status.SENDING, Status.CANCELLED, Status.DEAD, Status.SUPPRESSED}),
    Status.FAILED: frozenset({Status.QUEUED}),
    Status.DEAD: frozenset({Status.QUEUED}),
    Status.DELIVERED: frozenset(),
    Status.CANCELLED: frozenset(),
    Status.SUPPRESSED: frozenset(),
}
FINISHED_STATUSES = frozenset({Status.DELIVERED, Status.FAILED, Status.DEAD, Status.CANCELLED, Status.SUPPRESSED})
PENDING_STATUSES = frozenset({Status.ACCEPTED, Status.QUEUED, Status.RETRYING})


def sources_of(target: str) -> list[str]:
    return sorted(source for source, targets in TRANSITIONS.items() if target in targets)


class Notification(models.Model):
    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    client = models.ForeignKey(ApiClient, on_delete=models.PROTECT, related_name="notifications")
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
    # not a delayed broker message, is what holds long waits (see services/outbox.py).
    next_attempt_at = models.DateTimeField(null=True, blank=True)
    enqueued_at = models.DateTimeField(null=True, blank=True)
    claimed_at = models.DateTimeField(null=True, blank=True)
    last_error = models.TextField(blank=True, default="")
    provider_message_id = models.CharField(max_length=255, blank=True, default="")
    trace_id = models.CharField(max_length=32, blank=True, default="")
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

    # Not columns: what claim_for_delivery's RETURNING adds for the send.
    client_name: str
    client_webhook_secret: str
    last_attempt_number: int

    class Meta:
        ordering = ["-created_at"]
        indexes = [
            # The admin's and the API's default order, and the date filter, on a large table.
            models.Index(fields=["created_at"], name="notif_created"),
            models.Index(fields=["status", "created_at"], name="notif_status_created"),
            models.Index(fields=["client", "-created_at"], name="notif_client_created"),
            models.Index(fields=["client", "user_id"], name="notif_client_user"),
            models.Index(fields=["user_id"], name="notif_user"),
            models.Index(fields=["channel", "status"], name="notif_channel_status"),
            models.Index(fields=["status", "next_attempt_at"], name="notif_status_due"),
            models.Index(fields=["trace_id"], name="notif_trace"),
            models.Index(fields=["idempotency_key"], name="notif_idem_key"),
            # The admin's exact search ORs address with the other indexed columns: without this
            # one index the whole OR is a sequential scan (~150 ms a query at 1M rows).
            models.Index(fields=["address"], name="notif_address"),
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
    def claim_for_delivery(cls, notification_ids: list[Any], *, now: datetime) -> list[Notification]:
        """Take pending notifications for one send each, in one ``UPDATE ... RETURNING``: status
        ``sending``, one more attempt, ``claimed_at = now``; those another worker won, or no longer
        pending, are not returned. Each row comes back whole with its client's ``client_name`` and
        ``client_webhook_secret`` and ``last_attempt_number`` (attempt numbers keep counting across
        redrives, which reset ``attempt_count``), so the send needs no read of its own.

        Several ids on PostgreSQL lock with ``FOR UPDATE SKIP LOCKED``: a row another transaction
        holds (another worker's claim of a duplicate message, a cancel) is left to it, and two
        batches can never wait on each other. One id waits for the lock, then sees the outcome."""
        sources = sorted(PENDING_STATUSES)  # each may move to sending (TRANSITIONS)
        quote = connection.ops.quote_name
        table, clients = quote(cls._meta.db_table), quote(ApiClient._meta.db_table)
        attempts = quote(DeliveryAttempt._meta.db_table)
        columns = ", ".join(f"{table}.{quote(str(field.column))}" for field in cls._meta.concrete_fields)
        ids = [cls._meta.pk.get_db_prep_value(uuid.UUID(str(pk)), connection) for pk in notification_ids]  # type: ignore[union-attr]
        marks, status_marks = ", ".join(["%s"] * len(ids)), ", ".join(["%s"] * len(sources))
        wanted = f"{table}.id IN ({marks}) AND {table}.status IN ({status_marks})"
        if len(ids) > 1 and connection.vendor == "postgresql":
            wanted = f"{table}.id IN (SELECT id FROM {table} WHERE {wanted} ORDER BY id FOR UPDATE SKIP LOCKED)"
        # The client's fields as subqueries, not UPDATE ... FROM: SQLite cannot return the FROM
        # table's columns, and this runs on the embedded default too.
        sql = (
            f"UPDATE {table} SET status = %s, claimed_at = %s, updated_at = %s, attempt_count = attempt_count + 1 "
            f"WHERE {wanted} "
            f"RETURNING {columns}, "
            f"(SELECT c.name FROM {clients} c WHERE c.id = {table}.client_id) AS client_name, "
            f"(SELECT c.webhook_secret FROM {clients} c WHERE c.id = {table}.client_id) AS client_webhook_secret, "
            f"(SELECT COALESCE(MAX(a.number), 0) FROM {attempts} a WHERE a.notification_id = {table}.id) AS last_attempt_number"
        )
        stamp = connection.ops.adapt_datetimefield_value(now)
        return list(cls.objects.raw(sql, [Status.SENDING, stamp, stamp, *ids, *sources]))

    @classmethod
    def deliveries_finish(cls, provider_message_ids: dict[Any, str], *, claimed_at: datetime, delivered_at: datetime) -> int:
        """Mark delivered, in one conditional UPDATE, the notifications of ``provider_message_ids``
        (id -> the provider's message id) still in the claim made at ``claimed_at``; returns how
        many. One whose claim the sweeper recovered meanwhile keeps its newer state."""
        message_id = models.Case(
            *(models.When(pk=pk, then=models.Value(value[:255])) for pk, value in provider_message_ids.items()),
            output_field=models.CharField(),
        )
        return int(
            cls.objects.filter(
                pk__in=list(provider_message_ids), status__in=sources_of(Status.DELIVERED), claimed_at=claimed_at
            ).update(
                status=Status.DELIVERED,
                delivered_at=delivered_at,
                updated_at=django_timezone.now(),
                provider_message_id=message_id,
                last_error="",
            )
        )


class AttemptOutcome(models.TextChoices):
    IN_PROGRESS = "in_progress"
    DELIVERED = "delivered"
    TRANSIENT_ERROR = "transient_error"
    PERMANENT_ERROR = "permanent_error"
    INTERRUPTED = "interrupted"


class DeliveryAttempt(models.Model):
    """One try at handing a notification to its provider; never edited after it finishes."""

    notification = models.ForeignKey(Notification, on_delete=models.CASCADE, related_name="attempts")
    number = models.PositiveIntegerField()
    started_at = models.DateTimeField(default=django_timezone.now)
    finished_at = models.DateTimeField(null=True, blank=True)
    outcome = models.CharField(max_length=20, choices=AttemptOutcome.choices, default=AttemptOutcome.IN_PROGRESS)
    error_class = models.CharField(max_length=255, blank=True, default="")
    error_message = models.TextField(blank=True, default="")
    provider_response = models.TextField(blank=True, default="", help_text="A short summary of what the provider answered.")
    duration_ms = models.PositiveIntegerField(null=True, blank=True)

    class Meta:
        ordering = ["notification", "number"]
        constraints = [models.UniqueConstraint(fields=["notification", "number"], name="attempt_unique_number")]

    def __str__(self) -> str:
        return f"attempt {self.number} of {self.notification_id}: {self.outcome}"
