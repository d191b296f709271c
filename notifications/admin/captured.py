"""Admin for captured messages (test mode): what a test token's notifications would have sent, as rendered."""

from __future__ import annotations

from django.contrib import admin
from django.utils.html import format_html

from ..models import CapturedMessage
from .base import ReadOnlyAdmin, _notification_link, _pre


@admin.register(CapturedMessage)
class CapturedMessageAdmin(ReadOnlyAdmin):
    list_display = ("to", "channel", "subject", "client", "captured_at", "notification_link")
    list_filter = ("channel", "client")
    list_select_related = ("client",)
    show_full_result_count = False
    fields = ("client", "notification_link", "channel", "to", "subject", "body_text", "html_body_text", "captured_at")
    readonly_fields = fields

    @admin.display(description="notification")
    def notification_link(self, obj: CapturedMessage) -> str:
        return _notification_link(obj.notification_id)

    @admin.display(description="body")
    def body_text(self, obj: CapturedMessage) -> str:
        return _pre(obj.body)

    @admin.display(description="HTML part (as source)")
    def html_body_text(self, obj: CapturedMessage) -> str:
        return _pre(obj.html_body) if obj.html_body else format_html("{}", "-")
