"""Admin for topics and broadcasts: each broadcast's progress (made and delivered of its total) and
counts, and Cancel through the service."""

from __future__ import annotations

from django.contrib import admin, messages
from django.db.models import Count, QuerySet
from django.http import HttpRequest
from django.urls import reverse
from django.utils.html import format_html

from .. import selectors, services
from ..errors import NotificationError
from ..models import Broadcast, Topic
from .base import ModeFilter, ReadOnlyAdmin, _pretty_json, _report


@admin.register(Topic)
class TopicAdmin(ReadOnlyAdmin):
    list_display = ("key", "name", "client", "subscribers", "updated_at")
    list_filter = (ModeFilter, "client")
    list_select_related = ("client",)
    search_fields = ("key", "name")
    fields = ("key", "name", "client", "subscribers", "created_at", "updated_at")

    def get_queryset(self, request: HttpRequest) -> QuerySet[Topic]:
        return super().get_queryset(request).annotate(subscriber_count=Count("subscriptions"))

    @admin.display(description="subscribers", ordering="subscriber_count")
    def subscribers(self, obj: Topic) -> int:
        return int(getattr(obj, "subscriber_count", 0))


def _progress(done: int, total: int) -> str:
    # <progress> needs no style attribute, which the Content-Security-Policy would refuse.
    return format_html('<progress value="{}" max="{}"></progress> {} / {}', done, max(total, 1), done, total)


@admin.register(Broadcast)
class BroadcastAdmin(ReadOnlyAdmin):
    list_display = (
        "short_id",
        "topic",
        "status",
        "channel",
        "client",
        "made",
        "delivered",
        "suppressed",
        "failed",
        "created_at",
    )
    list_filter = ("status", "channel", ModeFilter, "client")
    list_select_related = ("client", "topic")
    # Each row's counts are one GROUP BY over the (broadcast, status) index: keep pages short.
    list_per_page = 25
    actions = ("cancel_selected",)
    fieldsets = (
        (None, {"fields": ("id", "status", "failure_reason", "topic", "client", "channel", "channels", "priority", "category")}),
        ("Progress", {"fields": ("made", "delivered", "counts", "cursor", "started_at", "finished_at", "updated_at")}),
        ("Message", {"fields": ("subject", "message", "template_key", "locale", "data_pretty", "metadata_pretty")}),
        ("Request", {"fields": ("idempotency_key", "created_at", "notifications_link")}),
    )

    def _counts(self, obj: Broadcast) -> selectors.BroadcastCounts:
        cached = getattr(obj, "_counts_cache", None)
        if cached is None:
            cached = selectors.broadcast_counts(broadcast_id=obj.pk)
            obj._counts_cache = cached  # type: ignore[attr-defined]
        return cached

    @admin.display(description="id", ordering="id")
    def short_id(self, obj: Broadcast) -> str:
        return str(obj.pk)

    @admin.display(description="made / total")
    def made(self, obj: Broadcast) -> str:
        return _progress(self._counts(obj).created, obj.total)

    @admin.display(description="delivered / total")
    def delivered(self, obj: Broadcast) -> str:
        return _progress(self._counts(obj).delivered, obj.total)

    @admin.display(description="suppressed")
    def suppressed(self, obj: Broadcast) -> int:
        return self._counts(obj).suppressed

    @admin.display(description="failed")
    def failed(self, obj: Broadcast) -> int:
        return self._counts(obj).failed

    @admin.display(description="counts")
    def counts(self, obj: Broadcast) -> str:
        return _pretty_json(vars(self._counts(obj)))

    @admin.display(description="data")
    def data_pretty(self, obj: Broadcast) -> str:
        return _pretty_json(obj.data)

    @admin.display(description="metadata")
    def metadata_pretty(self, obj: Broadcast) -> str:
        return _pretty_json(obj.metadata)

    @admin.display(description="notifications")
    def notifications_link(self, obj: Broadcast) -> str:
        url = reverse("admin:notifications_notification_changelist") + f"?broadcast={obj.pk}"
        return format_html('<a href="{}">its notifications</a>', url)

    @admin.action(description="Cancel selected broadcasts", permissions=["retry"])
    def cancel_selected(self, request: HttpRequest, queryset: QuerySet[Broadcast]) -> None:
        done = skipped = 0
        for broadcast in queryset.select_related("client"):
            try:
                services.broadcast_cancel(client=broadcast.client, broadcast_id=broadcast.pk)
            except NotificationError:
                skipped += 1
                continue
            self.log_change(request, broadcast, "Cancelled")
            done += 1
        self.message_user(request, _report(done, skipped, "cancelled"), messages.SUCCESS if done else messages.WARNING)
