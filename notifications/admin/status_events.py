"""Admin for status events (the status webhooks posted to API clients): read-only, filtered by state
and type, with "Send again" for dead ones through the service."""

from __future__ import annotations

from typing import Any

from django.contrib import admin, messages
from django.db.models import Q, QuerySet
from django.http import HttpRequest

from .. import services
from ..models import StatusEvent, StatusEventState
from .base import LargeTablePaginator, ModeFilter, ReadOnlyAdmin, _as_uuid, _notification_link, _pre, _pretty_json, _report

SHOWN_FIELDS = (
    "id",
    "type",
    "state",
    "client",
    "notification_link",
    "status",
    "channel",
    "occurred_at",
    "attempt_count",
    "next_attempt_at",
    "enqueued_at",
    "delivered_at",
    "last_error_pre",
    "payload_pretty",
    "created_at",
)


@admin.register(StatusEvent)
class StatusEventAdmin(ReadOnlyAdmin):
    list_display = ("id", "type", "state", "client", "notification_id", "attempt_count", "next_attempt_at", "occurred_at")
    list_filter = ("state", "type", "channel", ModeFilter, "client")
    list_select_related = ("client",)
    search_fields = ("id", "notification__id")
    search_help_text = "Exact event id or notification id."
    show_full_result_count = False
    paginator = LargeTablePaginator
    actions = ("send_again_selected",)
    fields = SHOWN_FIELDS
    readonly_fields = SHOWN_FIELDS

    def get_search_results(self, request: HttpRequest, queryset: QuerySet, search_term: str) -> tuple[QuerySet, bool]:
        # Ids are UUIDs: an exact match, never a LIKE over the table.
        if not search_term.strip():
            return queryset, False
        term = _as_uuid(search_term)
        if term is None:
            return queryset.none(), False
        return queryset.filter(Q(pk=term) | Q(notification_id=term)), False

    @admin.display(description="notification")
    def notification_link(self, event: StatusEvent) -> str:
        return _notification_link(event.notification_id)

    @admin.display(description="last error")
    def last_error_pre(self, event: StatusEvent) -> str:
        return _pre(event.last_error)

    @admin.display(description="payload (as posted)")
    def payload_pretty(self, event: StatusEvent) -> str:
        return _pretty_json(services.status_event_payload(event))

    def get_actions(self, request: HttpRequest) -> Any:
        actions = super().get_actions(request)
        if not self.has_retry_permission(request):
            actions.pop("send_again_selected", None)
        return actions

    @admin.action(description="Send selected dead events again")
    def send_again_selected(self, request: HttpRequest, queryset: QuerySet[StatusEvent]) -> None:
        done = skipped = 0
        for event in queryset:
            if event.state != StatusEventState.DEAD or not services.status_event_redrive(event=event):
                skipped += 1
                continue
            self.log_change(request, event, "Sent again")
            done += 1
        self.message_user(request, _report(done, skipped, "sent again"), messages.SUCCESS)
