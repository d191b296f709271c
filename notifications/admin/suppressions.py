"""Admin for the suppression list: search and read it; support staff remove an entry through the
service, and Django's delete writes the removal to the admin log with the user."""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.db.models import QuerySet
from django.http import HttpRequest

from .. import services
from ..models import Suppression
from .base import ModeFilter, ReadOnlyAdmin, _notification_link

# Given to the support group by migration 0008, with view_suppression.
DELETE_PERMISSION = "notifications.delete_suppression"


@admin.register(Suppression)
class SuppressionAdmin(ReadOnlyAdmin):
    list_display = ("address", "channel", "reason", "client", "created_at", "notification_link")
    list_filter = ("reason", "channel", ModeFilter, "client")
    list_select_related = ("client",)
    search_fields = ("address",)
    search_help_text = "Exact address (email, phone number or push token)."
    show_full_result_count = False
    fields = ("client", "channel", "address", "reason", "created_at", "notification_link")
    readonly_fields = fields

    @admin.display(description="from notification")
    def notification_link(self, obj: Suppression) -> str:
        return _notification_link(obj.notification_id)

    def get_search_results(self, request: HttpRequest, queryset: QuerySet, search_term: str) -> tuple[QuerySet, bool]:
        # Exact, on the indexed column: a LIKE scan of a long list is never what support needs.
        term = search_term.strip()
        return (queryset.filter(address=term) if term else queryset), False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return request.user.has_perm(DELETE_PERMISSION)

    def delete_model(self, request: HttpRequest, obj: Suppression) -> None:
        services.suppression_delete(suppression=obj)

    def delete_queryset(self, request: HttpRequest, queryset: QuerySet[Suppression]) -> None:
        for suppression in queryset:
            services.suppression_delete(suppression=suppression)
