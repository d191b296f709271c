"""List filters the dashboard's links use: a failure's reason and the provider account.

Their choices come from the dashboard's counters (a few thousand rows), never from a DISTINCT over
the notifications or their attempts, which at a million rows is a scan on every page.
"""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.db.models import Exists, OuterRef, QuerySet
from django.http import HttpRequest

from .. import selectors
from ..models import DeliveryAttempt
from ..selectors.dashboard import ONLY_ACCOUNT


def _with_current(choices: list[str], current: str | None) -> list[str]:
    """The choices, and the one the page is filtered by even when it is not among them (a link
    from the dashboard to an older hour), so the filter applies and says what it is."""
    return choices if current is None or current in choices else [*choices, current]


class FailureReasonFilter(admin.SimpleListFilter):
    """Failed and dead notifications by why they failed (the error's code, as the dashboard counts it)."""

    title = "failure reason"
    parameter_name = "failure_reason"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        return [(reason, reason) for reason in _with_current(selectors.failure_reasons_recent(), self.value())]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        return queryset.filter(failure_reason=self.value()) if self.value() else queryset


class ProviderAccountFilter(admin.SimpleListFilter):
    """By the provider account a send went through ("-": a channel's only account, unnamed)."""

    title = "provider account"
    parameter_name = "account"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        accounts = [account or ONLY_ACCOUNT for account in selectors.provider_accounts_recent()]
        return [(value, "(only account)" if value == ONLY_ACCOUNT else value) for value in _with_current(accounts, self.value())]

    def account(self) -> str | None:
        value = self.value()
        return None if value is None else "" if value == ONLY_ACCOUNT else value

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        account = self.account()
        if account is None:
            return queryset
        if queryset.model is DeliveryAttempt:
            return queryset.filter(account=account)
        # A notification: one of its attempts went through the account (the last one, for those
        # the dashboard counts, unless failover moved it between accounts).
        return queryset.filter(Exists(DeliveryAttempt.objects.filter(notification=OuterRef("pk"), account=account)))
