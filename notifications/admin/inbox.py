"""Admin for the in-app inbox: a recipient's items and their states (seen, read, archived), for
support staff answering "I never saw it"; read-only, as the user's own marks are the truth."""

from __future__ import annotations

from django.contrib import admin
from django.urls import reverse
from django.utils.html import format_html

from ..models import InboxItem, Recipient
from .base import LargeTablePaginator, ReadOnlyAdmin, _notification_link, _pretty_json


@admin.register(InboxItem)
class InboxItemAdmin(ReadOnlyAdmin):
    list_display = ("user_id", "client", "title", "category", "created_at", "state", "seen_at", "read_at", "archived_at")
    list_filter = ("client", "category")
    list_select_related = ("client",)
    search_fields = ("=user_id", "=thread_key")
    ordering = ("-created_at", "-id")
    paginator = LargeTablePaginator
    show_full_result_count = False
    fieldsets = (
        (None, {"fields": ("client", "user_id", "notification", "title", "body", "action_url", "category", "thread_key")}),
        ("State", {"fields": ("created_at", "seen_at", "read_at", "archived_at")}),
        ("Data", {"fields": ("data_pretty",)}),
    )

    @admin.display(description="state")
    def state(self, item: InboxItem) -> str:
        if item.archived_at:
            return "archived"
        return "read" if item.read_at else "seen" if item.seen_at else "unseen"

    @admin.display(description="notification")
    def notification(self, item: InboxItem) -> str:
        return _notification_link(item.notification_id)

    @admin.display(description="data")
    def data_pretty(self, item: InboxItem) -> str:
        return _pretty_json(item.data)


def recipient_inbox_link(recipient: Recipient) -> str:
    """A link from a recipient's page to their inbox's items."""
    url = reverse("admin:notifications_inboxitem_changelist")
    return format_html(
        '<a href="{}?client__id__exact={}&amp;q={}">their inbox items</a>', url, recipient.client_id, recipient.user_id
    )
