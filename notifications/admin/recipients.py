"""Admin for recipients: each client's users and their address per channel, read-only."""

from __future__ import annotations

from django.contrib import admin

from .. import services
from ..models import Recipient
from .base import ModeFilter, ReadOnlyAdmin
from .inbox import recipient_inbox_link


@admin.register(Recipient)
class RecipientAdmin(ReadOnlyAdmin):
    list_display = ("user_id", "client", "email", "phone", "webhook_url", "updated_at")
    list_filter = (ModeFilter, "client")
    list_select_related = ("client",)
    search_fields = ("=user_id", "=email", "=phone")
    # The recipient's stored fields as the service defines them, so a new one shows up here too.
    readonly_fields = ("client", "user_id", "inbox", *services.RECIPIENT_FIELDS, "preferences", "created_at", "updated_at")

    @admin.display(description="in-app inbox")
    def inbox(self, recipient: Recipient) -> str:
        return recipient_inbox_link(recipient)
