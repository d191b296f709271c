"""Admin for notifications and their delivery attempts: search, read, and cancel through the service."""

from __future__ import annotations

import uuid
from typing import Any

from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied
from django.db.models import Q, QuerySet
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.shortcuts import get_object_or_404
from django.urls import URLPattern, path, reverse
from django.utils.html import format_html, format_html_join
from django.views.decorators.http import require_POST

from .. import services
from ..errors import NotificationError
from ..models import PENDING_STATUSES, DeliveryAttempt, Notification
from .base import LargeTablePaginator, ReadOnlyAdmin, _as_uuid, _pre, _pretty_json, _report

# What support reads of one try, on the notification's page and the attempts' own.
ATTEMPT_FIELDS = (
    "number",
    "outcome",
    "started_at",
    "finished_at",
    "duration_ms",
    "error_class",
    "error_message",
    "provider_response",
)


class DeliveryAttemptInline(admin.TabularInline):
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
    list_display = ("short_id", "status", "channel", "address", "client", "attempt_count", "created_at", "delivered_at")
    list_filter = (
        "status",
        "suppressed_reason",
        "provider_status",
        "channel",
        "client",
        ("created_at", admin.DateFieldListFilter),
    )
    list_select_related = ("client",)
    # Searched as exact matches on indexed columns (see get_search_results): a LIKE scan of a large
    # table is what a support search must never turn into.
    search_fields = ("id", "address", "idempotency_key", "trace_id", "user_id")
    search_help_text = "Exact id, recipient address, idempotency key, trace id or user id."
    show_full_result_count = False
    paginator = LargeTablePaginator
    inlines = (DeliveryAttemptInline,)
    actions = ("cancel_selected",)
    fieldsets = (
        (None, {"fields": ("id", "status", "channel", "address", "client", "user_id", "priority")}),
        (
            "Message",
            {"fields": ("rendered_message", "html_message_pre", "metadata_pretty", "template_key", "locale", "headers_pretty")},
        ),
        ("Consent", {"fields": ("category", "suppressed_reason", "scheduled_for")}),
        (
            "Delivery",
            {
                "fields": (
                    "attempt_count",
                    "last_error",
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
        return str(obj.pk)

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
        extra_context["can_cancel"] = bool(
            notification and notification.status in PENDING_STATUSES and self.has_retry_permission(request)
        )
        return super().change_view(request, object_id, form_url, extra_context)

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
class DeliveryAttemptAdmin(ReadOnlyAdmin):
    list_display = ("notification", "number", "outcome", "started_at", "finished_at", "duration_ms", "error_class")
    list_filter = ("outcome",)
    list_select_related = ("notification",)
    show_full_result_count = False
    readonly_fields = ("notification", *ATTEMPT_FIELDS)
