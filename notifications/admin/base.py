"""What the support admin's pages share: the read-only base class, the retry permission, display helpers.

Support users (the ``support`` group of migration 0003) may view notifications, their attempts,
recipients and dead letters, and retry, discard or cancel through the services; nothing here lets
them edit a payload or delete a row. Every action calls a service and is written to the admin log.
API clients are for superusers only.
"""

from __future__ import annotations

import json
import uuid
from typing import Any

from django.contrib import admin
from django.contrib.admin.utils import flatten_fieldsets
from django.core.paginator import Paginator
from django.db.models import QuerySet
from django.http import HttpRequest
from django.urls import reverse
from django.utils.functional import cached_property
from django.utils.html import format_html

from .. import selectors
from ..models import ApiClient

RETRY_PERMISSION = "notifications.retry_deadletter"


class LargeTablePaginator(Paginator):
    """Counts an unfiltered changelist of a large table from PostgreSQL's estimate instead of a
    COUNT(*) on every page (~90 ms at a million rows). Filtered lists, small tables and other
    databases are counted exactly; the estimate only says how many pages there are about."""

    estimate_above = 100_000

    @cached_property
    def count(self) -> int:
        queryset = self.object_list
        if isinstance(queryset, QuerySet) and not queryset.query.where:
            estimate = selectors.table_row_estimate(queryset.model)
            if estimate is not None and estimate >= self.estimate_above:
                return estimate
        return int(super().count)


def _pre(text: str) -> str:
    return format_html('<pre class="admin-text">{}</pre>', text)


def _pretty_json(value: Any) -> str:
    return _pre(json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False, default=str))


def _as_uuid(term: str) -> uuid.UUID | None:
    try:
        return uuid.UUID(term.strip())
    except ValueError:
        return None


def _notification_link(notification_id: Any, *, label: str = "") -> str:
    """A link to the notification's admin page ("-" when there is none), showing ``label`` or its id."""
    if notification_id is None:
        return "-"
    url = reverse("admin:notifications_notification_change", args=[notification_id])
    return format_html('<a href="{}">{}</a>', url, label or str(notification_id))


def _digest_members_link(digest_id: Any) -> str:
    """A link to the list of a digest's members (its notifications still ``digested``)."""
    if digest_id is None:
        return "-"
    url = reverse("admin:notifications_notification_changelist")
    return format_html('<a href="{}?digest={}&amp;status__exact=digested">its members</a>', url, digest_id)


class ModeFilter(admin.SimpleListFilter):
    """Live or test: the rows of live clients or of their test modes (models/clients.py); both
    by default. On a client's rows it filters by their client, through its index."""

    title = "mode"
    parameter_name = "mode"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        return [("live", "live"), ("test", "test")]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        if self.value() not in ("live", "test"):
            return queryset
        is_test = self.value() == "test"
        if queryset.model is ApiClient:
            return queryset.filter(is_test=is_test)
        return queryset.filter(client__in=ApiClient.objects.filter(is_test=is_test).values("pk"))


def _report(done: int, skipped: int, verb: str) -> str:
    return f"{done} {verb}, {skipped} skipped"


class ReadOnlyAdmin(admin.ModelAdmin):
    """Records nobody edits by hand: they change only through the services."""

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_retry_permission(self, request: HttpRequest) -> bool:
        return request.user.has_perm(RETRY_PERMISSION)

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> Any:
        # Every field a page shows is read-only, so a fieldset is the one list to keep.
        if self.fieldsets:
            return (*self.readonly_fields, *flatten_fieldsets(self.fieldsets))
        return self.readonly_fields
