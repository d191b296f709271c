"""Admin for digests: a read-only list of who is being gathered, what closed and what it was sent as."""

from __future__ import annotations

from django.contrib import admin

from ..models import Digest, DigestStatus
from .base import ModeFilter, ReadOnlyAdmin, _digest_members_link, _notification_link, _pretty_json


@admin.register(Digest)
class DigestAdmin(ReadOnlyAdmin):
    list_display = ("key", "user_id", "client", "status", "item_count", "max_items", "opened_at", "closes_at", "sent_as")
    list_filter = ("status", "channel", ModeFilter, "client")
    list_select_related = ("client",)
    search_fields = ("=key", "=user_id")
    date_hierarchy = "opened_at"
    fieldsets = (
        (None, {"fields": ("id", "client", "user_id", "key", "status", "failure_reason", "item_count", "max_items", "members")}),
        ("Window", {"fields": ("opened_at", "closes_at", "closed_at")}),
        ("Sent as", {"fields": ("sent_as", "channel", "address", "template_key", "locale", "subject", "category", "priority")}),
        ("Metadata", {"fields": ("metadata_pretty",)}),
    )

    @admin.display(description="sent as")
    def sent_as(self, obj: Digest) -> str:
        if obj.notification_id is None:
            return "nothing sent" if obj.status == DigestStatus.EMPTY else "-"
        return _notification_link(obj.notification_id, label=str(obj.notification_id)[:8])

    @admin.display(description="members")
    def members(self, obj: Digest) -> str:
        return _digest_members_link(obj.pk)

    @admin.display(description="metadata")
    def metadata_pretty(self, obj: Digest) -> str:
        return _pretty_json(obj.metadata)
