"""Admin for API clients, superusers only: create one, issue it a test token, rotate its token,
revoke it, set its own limits; never delete it. A client's test mode is listed as a row of its own."""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest

from .. import services
from ..errors import RateLimitExceeded, ValidationFailed
from ..models import ApiClient
from ..services.inbox import inbox_allowed_origins_set, origin_normalize
from .base import ModeFilter, _report

# What an existing client's page shows read-only: a client changes only through the actions...
SHOWN_FIELDS = ("name", "mode", "token_prefix", "is_active", "status_webhook_url", "created_at", "token_rotated_at")
# ...but for its own limits (empty: the setting's default), saved through services.api_client_limits_set,
# and the origins whose pages may show its users' inboxes (services.inbox.inbox_allowed_origins_set).
LIMIT_FIELDS = ("topic_subscribers_max", "broadcasts_per_hour_max")
ORIGINS_FIELD = "inbox_allowed_origins"


class ApiClientForm(forms.ModelForm):  # type: ignore[type-arg]
    def clean_inbox_allowed_origins(self) -> list[str]:
        origins = self.cleaned_data.get(ORIGINS_FIELD) or []
        if not isinstance(origins, list):
            raise forms.ValidationError('a JSON list of origins, e.g. ["https://app.example.com"]')
        try:
            return [origin_normalize(origin) for origin in origins]
        except ValidationFailed as exc:
            raise forms.ValidationError(exc.message) from None


@admin.register(ApiClient)
class ApiClientAdmin(admin.ModelAdmin):
    form = ApiClientForm
    list_display = ("name", "mode", "token_prefix", "is_active", "created_at", "token_rotated_at")
    list_filter = ("is_active", ModeFilter)
    search_fields = ("name",)
    actions = ("issue_test_token_selected", "rotate_token_selected", "rotate_webhook_secret_selected", "revoke_selected")

    def has_module_permission(self, request: HttpRequest) -> bool:
        return request.user.is_active and request.user.is_superuser

    def has_view_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return request.user.is_active and request.user.is_superuser

    def has_add_permission(self, request: HttpRequest) -> bool:
        return request.user.is_active and request.user.is_superuser

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return request.user.is_active and request.user.is_superuser

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        # A client owns notifications (PROTECT); revoking is how one is retired.
        return False

    def get_fields(self, request: HttpRequest, obj: Any = None) -> Any:
        return ("name",) if obj is None else (*SHOWN_FIELDS, *LIMIT_FIELDS, ORIGINS_FIELD)

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> Any:
        return () if obj is None else SHOWN_FIELDS

    def save_model(self, request: HttpRequest, obj: ApiClient, form: Any, change: bool) -> None:
        if change:
            services.api_client_limits_set(client=obj, **{name: form.cleaned_data[name] for name in LIMIT_FIELDS})
            inbox_allowed_origins_set(client=obj, origins=form.cleaned_data[ORIGINS_FIELD])
            return
        client, token = services.api_client_create(name=form.cleaned_data["name"])
        obj.pk = client.pk
        obj.__dict__.update({k: v for k, v in client.__dict__.items() if not k.startswith("_")})
        self._show_token(request, client, token)

    @admin.display(description="mode", ordering="is_test")
    def mode(self, obj: ApiClient) -> str:
        return obj.mode

    def _show_token(self, request: HttpRequest, client: ApiClient, token: str) -> None:
        self.message_user(
            request, f"API token for {client.name!r}: {token} (copy it now; it is not shown again)", messages.WARNING
        )

    @admin.action(description="Issue a test token for selected clients")
    def issue_test_token_selected(self, request: HttpRequest, queryset: QuerySet[ApiClient]) -> None:
        done = skipped = 0
        for client in queryset:
            if client.is_test or not client.is_active:
                skipped += 1
                continue
            test, token = services.api_client_test_token_issue(name=client.name)
            self.log_change(request, client, "Issued a test token")
            self._show_token(request, test, token)
            done += 1
        self.message_user(request, _report(done, skipped, "issued a test token"), messages.SUCCESS)

    @admin.action(description="Rotate the token of selected clients")
    def rotate_token_selected(self, request: HttpRequest, queryset: QuerySet[ApiClient]) -> None:
        for client in queryset:
            token = services.api_client_rotate_token(client=client)
            self.log_change(request, client, "Rotated token")
            self._show_token(request, client, token)

    @admin.action(description="Rotate the webhook secret of selected clients")
    def rotate_webhook_secret_selected(self, request: HttpRequest, queryset: QuerySet[ApiClient]) -> None:
        for client in queryset:
            try:
                secret = services.api_client_rotate_webhook_secret(client=client)
            except RateLimitExceeded as exc:
                self.message_user(request, f"{client.name!r} not rotated: {exc.message}", messages.ERROR)
                continue
            self.log_change(request, client, "Rotated webhook secret")
            self.message_user(
                request,
                f"Webhook secret for {client.name!r}: {secret} (copy it now; it is not shown again)",
                messages.WARNING,
            )

    @admin.action(description="Revoke selected clients")
    def revoke_selected(self, request: HttpRequest, queryset: QuerySet[ApiClient]) -> None:
        done = skipped = 0
        for client in queryset:
            if not client.is_active:
                skipped += 1
                continue
            services.api_client_revoke(client=client)
            self.log_change(request, client, "Revoked")
            done += 1
        self.message_user(request, _report(done, skipped, "revoked"), messages.SUCCESS)
