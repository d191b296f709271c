"""Admin for notifications and their delivery attempts: search, read, and retry or cancel through the services."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any

from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied
from django.db.models import Q, QuerySet
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.shortcuts import get_object_or_404
from django.urls import URLPattern, path, reverse
from django.utils import timezone
from django.utils.html import format_html, format_html_join
from django.views.decorators.http import require_POST

from .. import selectors, services
from ..errors import NotificationError
from ..models import PENDING_STATUSES, DeadLetter, DeliveryAttempt, Notification, Status
from .base import LargeTablePaginator, ModeFilter, ReadOnlyAdmin, _as_uuid, _pre, _pretty_json, _report
from .filters import FailureReasonFilter, ProviderAccountFilter

# A changelist cell says this much of a long text; the page says all of it.
LIST_TEXT_CHARS = 60
# The statuses a notification's Retry redrives from (through its unresolved dead letter).
RETRYABLE_STATUSES = (Status.FAILED, Status.DEAD)

# What support reads of one try, on the notification's page and the attempts' own.
ATTEMPT_FIELDS = (
    "number",
    "channel",
    "account",
    "outcome",
    "started",
    "duration_ms",
    "error",
    "provider_response",
)


def _to_the_second(moment: datetime | None) -> str:
    return timezone.localtime(moment).strftime("%Y-%m-%d %H:%M:%S") if moment else "-"


def _cut(text: str, chars: int = LIST_TEXT_CHARS) -> str:
    """The first line of ``text``, cut to ``chars`` with an ellipsis."""
    line = text.strip().splitlines()[0] if text.strip() else ""
    return line[:chars] + ("…" if len(line) > chars else "")


class AttemptDisplay:
    """The attempt's columns that are not plain fields: its start to the second, its error."""

    @admin.display(description="started", ordering="started_at")
    def started(self, obj: DeliveryAttempt) -> str:
        return _to_the_second(obj.started_at)

    @admin.display(description="error")
    def error(self, obj: DeliveryAttempt) -> str:
        if not obj.error_class:
            return obj.error_message or "-"
        return format_html("<strong>{}</strong>: {}", obj.error_class.rsplit(".", 1)[-1], obj.error_message)


class DeliveryAttemptInline(AttemptDisplay, admin.TabularInline):
    model = DeliveryAttempt
    extra = 0
    fields = ATTEMPT_FIELDS
    readonly_fields = fields
    ordering = ("number",)

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


@admin.register(Notification)
class NotificationAdmin(ReadOnlyAdmin):
    # Narrow columns, so the list reads at 1280 px with its filters beside it (admin.css).
    list_display = ("short_id", "user", "channel", "category", "status", "last_error_short", "created")
    list_filter = (
        "status",
        "channel",
        "category",
        ModeFilter,
        "client",
        "provider_status",
        "suppressed_reason",
        FailureReasonFilter,
        ProviderAccountFilter,
        ("created_at", admin.DateFieldListFilter),
    )
    list_select_related = ("category",)
    # Searched as exact matches on indexed columns (see get_search_results): a LIKE scan of a large
    # table is what a support search must never turn into.
    search_fields = ("id", "address", "idempotency_key", "trace_id", "user_id")
    search_help_text = "Exact id, recipient address, idempotency key, trace id or user id."
    show_full_result_count = False
    paginator = LargeTablePaginator
    inlines = (DeliveryAttemptInline,)
    actions = ("cancel_selected",)
    fieldsets = (
        (None, {"fields": ("id", "status", "channel", "route_summary", "address", "client", "user_id", "priority")}),
        (
            "Message",
            {"fields": ("rendered_message", "html_message_pre", "metadata_pretty", "template_key", "locale", "headers_pretty")},
        ),
        ("Consent", {"fields": ("category", "suppressed_reason", "scheduled_for")}),
        (
            "Delivery",
            {
                "fields": (
                    "attempts_made",
                    "last_error",
                    "failure_reason",
                    "provider_message_id",
                    "provider_status",
                    "provider_status_at",
                    "dead_letter_links",
                    "send_at",
                    "next_attempt_at",
                    "enqueued_at",
                    "claimed_at",
                    "delivered_at",
                )
            },
        ),
        ("Tracing", {"fields": ("trace_id", "idempotency_key", "created_at", "updated_at")}),
    )

    @admin.display(description="id", ordering="id")
    def short_id(self, obj: Notification) -> str:
        return format_html('<span title="{}">{}</span>', obj.pk, str(obj.pk)[:8])

    @admin.display(description="user", ordering="user_id")
    def user(self, obj: Notification) -> str:
        return format_html('<span title="{}">{}</span>', obj.user_id, _cut(obj.user_id, 24))

    @admin.display(description="last error")
    def last_error_short(self, obj: Notification) -> str:
        return _cut(obj.last_error) or "-"

    @admin.display(description="created", ordering="created_at")
    def created(self, obj: Notification) -> str:
        return _to_the_second(obj.created_at)

    @admin.display(description="route")
    def route_summary(self, obj: Notification) -> str:
        """A fallback notification's channels in order, what became of each and how many attempts it took."""
        if not obj.route:
            return "-"
        return format_html(
            '<ol class="notification-route">{}</ol>',
            format_html_join(
                "",
                "<li><strong>{}</strong>: {}{}{}</li>",
                (
                    (
                        entry["channel"],
                        entry["outcome"],
                        f" ({entry['reason']})" if entry.get("reason") else "",
                        f", {entry['attempts']} attempt{'s' if entry['attempts'] != 1 else ''}" if entry.get("attempts") else "",
                    )
                    for entry in obj.route
                ),
            ),
        )

    @admin.display(description="attempts")
    def attempts_made(self, obj: Notification) -> str:
        """Every attempt listed below, on every channel of its route; a retry starts a fresh budget."""
        made = obj.attempts.count()
        if made == obj.attempt_count:
            return str(made)
        return f"{made} ({obj.attempt_count} since the last retry)"

    @admin.display(description="message")
    def rendered_message(self, obj: Notification) -> str:
        subject = format_html("<p><strong>{}</strong></p>", obj.subject) if obj.subject else ""
        return format_html("{}{}", subject, _pre(obj.message))

    @admin.display(description="metadata")
    def metadata_pretty(self, obj: Notification) -> str:
        return _pretty_json(obj.metadata)

    @admin.display(description="HTML part")
    def html_message_pre(self, obj: Notification) -> str:
        return _pre(obj.html_message) if obj.html_message else "-"

    @admin.display(description="extra headers")
    def headers_pretty(self, obj: Notification) -> str:
        return _pretty_json(obj.headers) if obj.headers else "-"

    @admin.display(description="scheduled for")
    def scheduled_for(self, obj: Notification) -> Any:
        return obj.scheduled_for or "-"

    @admin.display(description="dead letters")
    def dead_letter_links(self, obj: Notification) -> str:
        dead_letters = list(obj.dead_letters.all())
        if not dead_letters:
            return "-"
        return format_html_join(
            ", ",
            '<a href="{}">#{} {} ({})</a>',
            (
                (
                    reverse("admin:notifications_deadletter_change", args=[dl.pk]),
                    dl.pk,
                    dl.get_reason_display(),
                    dl.get_resolution_display() or "unresolved",
                )
                for dl in dead_letters
            ),
        )

    def get_search_results(self, request: HttpRequest, queryset: QuerySet, search_term: str) -> tuple[QuerySet, bool]:
        term = search_term.strip()
        if not term:
            return queryset, False
        match = Q(address=term) | Q(idempotency_key=term) | Q(trace_id=term) | Q(user_id=term)
        as_uuid = _as_uuid(term)
        if as_uuid is not None:
            match |= Q(pk=as_uuid)
        return queryset.filter(match), False

    def get_urls(self) -> list[URLPattern]:
        return [
            path(
                "<uuid:object_id>/retry/",
                self.admin_site.admin_view(require_POST(self.retry_view)),
                name="notifications_notification_retry",
            ),
            path(
                "<uuid:object_id>/cancel/",
                self.admin_site.admin_view(require_POST(self.cancel_view)),
                name="notifications_notification_cancel",
            ),
            *super().get_urls(),
        ]

    def change_view(self, request: HttpRequest, object_id: str, form_url: str = "", extra_context: Any = None) -> HttpResponse:
        as_uuid = _as_uuid(object_id)
        notification = Notification.objects.filter(pk=as_uuid).only("status").first() if as_uuid else None
        extra_context = dict(extra_context or {})
        status = notification.status if notification is not None and self.has_retry_permission(request) else ""
        extra_context["can_cancel"] = status in PENDING_STATUSES
        extra_context["can_retry"] = (
            status in RETRYABLE_STATUSES and selectors.dead_letter_unresolved_of(notification_id=as_uuid) is not None
        )
        return super().change_view(request, object_id, form_url, extra_context)

    def retry_view(self, request: HttpRequest, object_id: uuid.UUID) -> HttpResponse:
        """Retry a failed or dead notification from its own page: its unresolved dead letter is
        redriven by the same code, audited and reported the same way, as the dead letter's Retry."""
        if not self.has_retry_permission(request):
            raise PermissionDenied
        notification = get_object_or_404(Notification.objects.only("id", "status"), pk=object_id)
        dead_letter = selectors.dead_letter_unresolved_of(notification_id=notification.pk)
        if dead_letter is None:
            self.message_user(
                request,
                _report(0, 1, "retried") + f": it is {notification.status} with no unresolved dead letter to retry",
                messages.WARNING,
            )
        else:
            dead_letters_admin = self.admin_site.get_model_admin(DeadLetter)
            dead_letters_admin.retry_dead_letters(request, [dead_letter])  # type: ignore[attr-defined]
            dead_letter.refresh_from_db()
            if dead_letter.resolution and dead_letter.resolved_by_id == request.user.pk:
                # Its history says so too; the dead letter's own entry says what the service did.
                self.log_change(request, notification, f"Retried (dead letter #{dead_letter.pk})")
        return HttpResponseRedirect(reverse("admin:notifications_notification_change", args=[notification.pk]))

    def _cancel(self, request: HttpRequest, notification: Notification) -> bool:
        try:
            services.notification_cancel(client=notification.client, notification_id=notification.pk)
        except NotificationError:
            return False
        self.log_change(request, notification, "Cancelled")
        return True

    def cancel_view(self, request: HttpRequest, object_id: uuid.UUID) -> HttpResponse:
        if not self.has_retry_permission(request):
            raise PermissionDenied
        notification = get_object_or_404(Notification.objects.select_related("client"), pk=object_id)
        if self._cancel(request, notification):
            self.message_user(request, _report(1, 0, "cancelled"), messages.SUCCESS)
        else:
            notification.refresh_from_db()
            self.message_user(
                request,
                _report(0, 1, "cancelled") + f": it is {notification.status} and can no longer be cancelled",
                messages.WARNING,
            )
        return HttpResponseRedirect(reverse("admin:notifications_notification_change", args=[notification.pk]))

    @admin.action(description="Cancel selected notifications", permissions=["retry"])
    def cancel_selected(self, request: HttpRequest, queryset: QuerySet[Notification]) -> None:
        done = skipped = 0
        for notification in queryset.select_related("client"):
            if self._cancel(request, notification):
                done += 1
            else:
                skipped += 1
        self.message_user(request, _report(done, skipped, "cancelled"), messages.SUCCESS if done else messages.WARNING)


@admin.register(DeliveryAttempt)
class DeliveryAttemptAdmin(AttemptDisplay, ReadOnlyAdmin):
    list_display = ("notification", "number", "channel", "account", "outcome", "started", "duration_ms", "error_class")
    list_filter = ("outcome", "channel", ProviderAccountFilter)
    list_select_related = ("notification",)
    show_full_result_count = False
    readonly_fields = ("notification", *ATTEMPT_FIELDS)
