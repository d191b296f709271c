"""Admin classes for support staff; every action calls a service and is written to the admin log.

Support users (the ``support`` group of migration 0003) may view notifications, their attempts,
recipients and dead letters, and retry, discard or cancel through the services; nothing here lets
them edit a payload or delete a row. API clients are for superusers only.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Iterable
from typing import Any
from urllib.parse import urlsplit

from django.contrib import admin, messages
from django.contrib.admin import helpers
from django.contrib.admin.utils import flatten_fieldsets
from django.core.exceptions import PermissionDenied
from django.db.models import Q, QuerySet
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.shortcuts import get_object_or_404
from django.template.defaultfilters import pluralize
from django.template.response import TemplateResponse
from django.urls import URLPattern, path, reverse
from django.utils import timezone
from django.utils.html import format_html, format_html_join
from django.utils.http import url_has_allowed_host_and_scheme
from django.utils.timesince import timesince
from django.views.decorators.http import require_POST

from . import services
from .errors import NotificationError
from .models import (
    PENDING_STATUSES,
    ApiClient,
    DeadLetter,
    DeadLetterSource,
    DeliveryAttempt,
    Notification,
    Recipient,
    Resolution,
)

RETRY_PERMISSION = "notifications.retry_deadletter"
# A bulk action's confirmation page lists this many rows and counts the rest.
CONFIRMATION_LISTED = 100


def _pre(text: str) -> str:
    return format_html('<pre style="white-space: pre-wrap; margin: 0">{}</pre>', text)


def _pretty_json(value: Any) -> str:
    return _pre(json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False, default=str))


def _as_uuid(term: str) -> uuid.UUID | None:
    try:
        return uuid.UUID(term.strip())
    except ValueError:
        return None


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


# --- Notifications -----------------------------------------------------------------------------


# What support reads of one try, on the notification's page and the attempts' own.
ATTEMPT_FIELDS = (
    "number",
    "outcome",
    "started_at",
    "finished_at",
    "duration_ms",
    "error_class",
    "error_message",
    "provider_response",
)


class DeliveryAttemptInline(admin.TabularInline):
    model = DeliveryAttempt
    extra = 0
    can_delete = False
    show_change_link = False
    fields = ATTEMPT_FIELDS
    readonly_fields = fields
    ordering = ("number",)

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


@admin.register(Notification)
class NotificationAdmin(ReadOnlyAdmin):
    list_display = ("short_id", "status", "channel", "address", "client", "attempt_count", "created_at", "delivered_at")
    list_filter = ("status", "channel", "client", ("created_at", admin.DateFieldListFilter))
    list_select_related = ("client",)
    # Searched as exact matches on indexed columns (see get_search_results): a LIKE scan of a large
    # table is what a support search must never turn into.
    search_fields = ("id", "address", "idempotency_key", "trace_id", "user_id")
    search_help_text = "Exact id, recipient address, idempotency key, trace id or user id."
    date_hierarchy = None
    show_full_result_count = False
    inlines = (DeliveryAttemptInline,)
    actions = ("cancel_selected",)
    fieldsets = (
        (None, {"fields": ("id", "status", "channel", "address", "client", "user_id", "priority")}),
        ("Message", {"fields": ("rendered_message", "metadata_pretty")}),
        (
            "Delivery",
            {
                "fields": (
                    "attempt_count",
                    "last_error",
                    "provider_message_id",
                    "dead_letter_links",
                    "send_at",
                    "next_attempt_at",
                    "enqueued_at",
                    "claimed_at",
                    "delivered_at",
                )
            },
        ),
        ("Tracing", {"fields": ("trace_id", "idempotency_key", "created_at", "updated_at")}),
    )

    @admin.display(description="id", ordering="id")
    def short_id(self, obj: Notification) -> str:
        return str(obj.pk)

    @admin.display(description="message")
    def rendered_message(self, obj: Notification) -> str:
        subject = format_html("<p><strong>{}</strong></p>", obj.subject) if obj.subject else ""
        return format_html("{}{}", subject, _pre(obj.message))

    @admin.display(description="metadata")
    def metadata_pretty(self, obj: Notification) -> str:
        return _pretty_json(obj.metadata)

    @admin.display(description="dead letters")
    def dead_letter_links(self, obj: Notification) -> str:
        dead_letters = list(obj.dead_letters.all())
        if not dead_letters:
            return "-"
        return format_html_join(
            ", ",
            '<a href="{}">#{} {} ({})</a>',
            (
                (
                    reverse("admin:notifications_deadletter_change", args=[dl.pk]),
                    dl.pk,
                    dl.get_reason_display(),
                    dl.get_resolution_display() or "unresolved",
                )
                for dl in dead_letters
            ),
        )

    def get_search_results(self, request: HttpRequest, queryset: QuerySet, search_term: str) -> tuple[QuerySet, bool]:
        term = search_term.strip()
        if not term:
            return queryset, False
        match = Q(address=term) | Q(idempotency_key=term) | Q(trace_id=term) | Q(user_id=term)
        as_uuid = _as_uuid(term)
        if as_uuid is not None:
            match |= Q(pk=as_uuid)
        return queryset.filter(match), False

    def get_urls(self) -> list[URLPattern]:
        return [
            path(
                "<uuid:object_id>/cancel/",
                self.admin_site.admin_view(require_POST(self.cancel_view)),
                name="notifications_notification_cancel",
            ),
            *super().get_urls(),
        ]

    def change_view(self, request: HttpRequest, object_id: str, form_url: str = "", extra_context: Any = None) -> HttpResponse:
        as_uuid = _as_uuid(object_id)
        notification = Notification.objects.filter(pk=as_uuid).only("status").first() if as_uuid else None
        extra_context = dict(extra_context or {})
        extra_context["can_cancel"] = bool(
            notification and notification.status in PENDING_STATUSES and self.has_retry_permission(request)
        )
        return super().change_view(request, object_id, form_url, extra_context)

    def _cancel(self, request: HttpRequest, notification: Notification) -> bool:
        try:
            services.notification_cancel(client=notification.client, notification_id=notification.pk)
        except NotificationError:
            return False
        self.log_change(request, notification, "Cancelled")
        return True

    def cancel_view(self, request: HttpRequest, object_id: uuid.UUID) -> HttpResponse:
        if not self.has_retry_permission(request):
            raise PermissionDenied
        notification = get_object_or_404(Notification.objects.select_related("client"), pk=object_id)
        if self._cancel(request, notification):
            self.message_user(request, _report(1, 0, "cancelled"), messages.SUCCESS)
        else:
            notification.refresh_from_db()
            self.message_user(
                request,
                _report(0, 1, "cancelled") + f": it is {notification.status} and can no longer be cancelled",
                messages.WARNING,
            )
        return HttpResponseRedirect(reverse("admin:notifications_notification_change", args=[notification.pk]))

    @admin.action(description="Cancel selected notifications", permissions=["retry"])
    def cancel_selected(self, request: HttpRequest, queryset: QuerySet[Notification]) -> None:
        done = skipped = 0
        for notification in queryset.select_related("client"):
            if self._cancel(request, notification):
                done += 1
            else:
                skipped += 1
        self.message_user(request, _report(done, skipped, "cancelled"), messages.SUCCESS if done else messages.WARNING)


@admin.register(DeliveryAttempt)
class DeliveryAttemptAdmin(ReadOnlyAdmin):
    list_display = ("notification", "number", "outcome", "started_at", "finished_at", "duration_ms", "error_class")
    list_filter = ("outcome",)
    list_select_related = ("notification",)
    show_full_result_count = False
    readonly_fields = ("notification", *ATTEMPT_FIELDS)


@admin.register(Recipient)
class RecipientAdmin(ReadOnlyAdmin):
    list_display = ("user_id", "client", "email", "phone", "webhook_url", "updated_at")
    list_filter = ("client",)
    list_select_related = ("client",)
    search_fields = ("=user_id", "=email", "=phone")
    readonly_fields = (
        "client",
        "user_id",
        "email",
        "phone",
        "push_tokens",
        "webhook_url",
        "locale",
        "timezone",
        "created_at",
        "updated_at",
    )


# --- Dead letters ------------------------------------------------------------------------------


class ResolvedFilter(admin.SimpleListFilter):
    title = "resolved"
    parameter_name = "resolved"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        return [("no", "Unresolved"), ("yes", "Resolved")]

    def queryset(self, request: HttpRequest, queryset: QuerySet) -> QuerySet:
        if self.value() == "no":
            return queryset.filter(resolution=Resolution.UNRESOLVED)
        if self.value() == "yes":
            return queryset.exclude(resolution=Resolution.UNRESOLVED)
        return queryset


@admin.register(DeadLetter)
class DeadLetterAdmin(ReadOnlyAdmin):
    list_display = (
        "id",
        "source",
        "channel",
        "reason",
        "short_error",
        "attempts",
        "moved_at",
        "age",
        "resolution_summary",
        "notification_status",
        "retry_button",
    )
    list_display_links = ("id",)
    list_filter = (ResolvedFilter, "channel", "reason", "source")
    list_select_related = ("notification", "resolved_by")
    search_fields = ("id", "notification__id", "notification__address", "routing_key", "last_error")
    search_help_text = "Dead letter id, notification id, recipient address, routing key, or text of the error."
    show_full_result_count = False
    actions = ("retry_selected", "discard_selected")
    fields = (
        "source",
        "notification_link",
        "channel",
        "reason",
        "last_error_pre",
        "attempts",
        "moved_at",
        "routing_key",
        "headers_pretty",
        "raw_body_pretty",
        "resolution",
        "resolved_by",
        "resolved_at",
    )
    readonly_fields = fields

    # -- columns and fields

    @admin.display(description="last error")
    def short_error(self, obj: DeadLetter) -> str:
        error = obj.last_error.strip().splitlines()[0] if obj.last_error.strip() else ""
        return error[:120] + ("…" if len(error) > 120 else "")

    # Ascending age is newest first: the reverse of moved_at.
    @admin.display(description="age", ordering="-moved_at")
    def age(self, obj: DeadLetter) -> str:
        return timesince(obj.moved_at, timezone.now())

    @admin.display(description="resolution", ordering="resolution")
    def resolution_summary(self, obj: DeadLetter) -> str:
        if not obj.resolution:
            return "unresolved"
        who = obj.resolved_by.get_username() if obj.resolved_by else "a command"
        when = timezone.localtime(obj.resolved_at).strftime("%Y-%m-%d %H:%M:%S") if obj.resolved_at else ""
        return f"{obj.get_resolution_display()} by {who} {when}".strip()

    @admin.display(description="outcome now")
    def notification_status(self, obj: DeadLetter) -> str:
        return obj.notification.status if obj.notification else "-"

    @admin.display(description="")
    def retry_button(self, obj: DeadLetter) -> str:
        if obj.resolution:
            return ""
        # The changelist is itself a POST form carrying the CSRF token; formaction sends it here.
        return format_html(
            '<button type="submit" class="button retry-button" formaction="{}?next=list">Retry</button>',
            reverse("admin:notifications_deadletter_retry", args=[obj.pk]),
        )

    @admin.display(description="notification")
    def notification_link(self, obj: DeadLetter) -> str:
        if obj.notification_id is None:
            return "-"
        return format_html(
            '<a href="{}">{}</a>',
            reverse("admin:notifications_notification_change", args=[obj.notification_id]),
            obj.notification_id,
        )

    @admin.display(description="last error")
    def last_error_pre(self, obj: DeadLetter) -> str:
        return _pre(obj.last_error)

    @admin.display(description="headers")
    def headers_pretty(self, obj: DeadLetter) -> str:
        return _pretty_json(obj.headers) if obj.headers else "-"

    @admin.display(description="raw body")
    def raw_body_pretty(self, obj: DeadLetter) -> str:
        if not obj.raw_body:
            return "-"
        try:
            return _pretty_json(json.loads(obj.raw_body))
        except ValueError:
            return _pre(obj.raw_body)

    def get_fields(self, request: HttpRequest, obj: Any = None) -> Any:
        fields = list(super().get_fields(request, obj))
        if obj is not None and obj.source != DeadLetterSource.EVENT:
            fields = [f for f in fields if f not in ("routing_key", "headers_pretty", "raw_body_pretty")]
        return fields

    def get_search_results(self, request: HttpRequest, queryset: QuerySet, search_term: str) -> tuple[QuerySet, bool]:
        term = search_term.strip()
        if not term:
            return queryset, False
        match = Q(notification__address=term) | Q(routing_key=term) | Q(last_error__icontains=term)
        if term.isdigit():
            match |= Q(pk=int(term))
        as_uuid = _as_uuid(term)
        if as_uuid is not None:
            match |= Q(notification_id=as_uuid)
        return queryset.filter(match), False

    def get_list_display(self, request: HttpRequest) -> Any:
        columns = list(super().get_list_display(request))
        if not self.has_retry_permission(request):
            columns.remove("retry_button")
        return columns

    def change_view(self, request: HttpRequest, object_id: str, form_url: str = "", extra_context: Any = None) -> HttpResponse:
        dead_letter = DeadLetter.objects.filter(pk=object_id).only("resolution").first() if object_id.isdigit() else None
        extra_context = dict(extra_context or {})
        extra_context["can_retry"] = bool(dead_letter and not dead_letter.resolution and self.has_retry_permission(request))
        return super().change_view(request, object_id, form_url, extra_context)

    def get_urls(self) -> list[URLPattern]:
        return [
            path(
                "<int:object_id>/retry/",
                self.admin_site.admin_view(require_POST(self.retry_view)),
                name="notifications_deadletter_retry",
            ),
            path(
                "<int:object_id>/discard/", self.admin_site.admin_view(self.discard_view), name="notifications_deadletter_discard"
            ),
            *super().get_urls(),
        ]

    # -- retry and discard: one code path for the buttons and the bulk actions

    def _apply(
        self,
        request: HttpRequest,
        dead_letters: Iterable[DeadLetter],
        operation: Callable[..., services.RedriveResult],
        verb: str,
        log_message: str,
    ) -> None:
        """Run ``operation`` (a dead-letter service) on each, log what it did, report N done, M skipped."""
        done = skipped = 0
        details: list[str] = []
        for dead_letter in dead_letters:
            result = operation(dead_letter=dead_letter, by=request.user)
            if result.done:
                done += 1
                self.log_change(request, dead_letter, f"{log_message}: {result.detail}")
            else:
                skipped += 1
                details.append(f"#{dead_letter.pk} skipped ({result.detail})")
        text = _report(done, skipped, verb)
        if details:
            text += ": " + "; ".join(details[:20])
        self.message_user(request, text, messages.SUCCESS if done and not skipped else messages.WARNING)

    def _retry(self, request: HttpRequest, dead_letters: Iterable[DeadLetter]) -> None:
        self._apply(request, dead_letters, services.dead_letter_redrive, "retried", "Retried")

    def _discard(self, request: HttpRequest, dead_letters: Iterable[DeadLetter]) -> None:
        self._apply(request, dead_letters, services.dead_letter_discard, "discarded", "Discarded")

    def retry_view(self, request: HttpRequest, object_id: int) -> HttpResponse:
        if not self.has_retry_permission(request):
            raise PermissionDenied
        dead_letter = get_object_or_404(DeadLetter, pk=object_id)
        self._retry(request, [dead_letter])
        if request.GET.get("next") == "list":
            return HttpResponseRedirect(self._changelist_clicked_from(request))
        return HttpResponseRedirect(reverse("admin:notifications_deadletter_change", args=[dead_letter.pk]))

    def _changelist_clicked_from(self, request: HttpRequest) -> str:
        """The DLQ list with the filters, search and page the row's Retry was clicked on."""
        changelist = reverse("admin:notifications_deadletter_changelist")
        referer = request.META.get("HTTP_REFERER", "")
        came_from = urlsplit(referer)
        if (
            came_from.path == changelist
            and came_from.query
            and url_has_allowed_host_and_scheme(referer, allowed_hosts={request.get_host()}, require_https=request.is_secure())
        ):
            return f"{changelist}?{came_from.query}"
        return changelist

    def discard_view(self, request: HttpRequest, object_id: int) -> HttpResponse:
        if not self.has_retry_permission(request):
            raise PermissionDenied
        dead_letter = get_object_or_404(DeadLetter, pk=object_id)
        if request.method == "POST" and request.POST.get("confirm") == "yes":
            self._discard(request, [dead_letter])
            return HttpResponseRedirect(reverse("admin:notifications_deadletter_change", args=[dead_letter.pk]))
        return self._confirmation(request, [dead_letter], action="", title="Discard this dead letter?", verb="Discard")

    def _confirmation(
        self,
        request: HttpRequest,
        dead_letters: list[DeadLetter],
        *,
        action: str,
        title: str,
        verb: str,
        total: int | None = None,
        select_across: bool = False,
        selected_ids: list[int] | None = None,
    ) -> TemplateResponse:
        total = len(dead_letters) if total is None else total
        context = {
            **self.admin_site.each_context(request),
            "title": title,
            "verb": verb,
            "action": action,
            "dead_letters": dead_letters,
            "total": total,
            "not_shown": total - len(dead_letters),
            "select_across": select_across,
            "selected_ids": [dl.pk for dl in dead_letters] if selected_ids is None else selected_ids,
            "opts": self.model._meta,
            "action_checkbox_name": helpers.ACTION_CHECKBOX_NAME,
        }
        return TemplateResponse(request, "admin/notifications/deadletter/confirm_action.html", context)

    def _confirmed_or_ask(
        self, request: HttpRequest, queryset: QuerySet[DeadLetter], *, action: str, verb: str, then: Callable[..., None]
    ) -> TemplateResponse | None:
        # Bulk actions always show what they are about to do first; the confirmation posts back.
        if request.POST.get("confirm") == "yes":
            then(request, queryset.order_by("pk"))
            return None
        # "Select all N" is carried forward as select_across (the form posts back to the same
        # filtered URL) rather than as one field per id: past DATA_UPLOAD_MAX_NUMBER_FIELDS ids
        # Django refuses the POST, and a page listing thousands of rows helps nobody.
        select_across = request.POST.get("select_across") == "1"
        # Without select_across the ids are one changelist page's checkboxes (list_max_show_all at most).
        selected_ids = [] if select_across else list(queryset.order_by("pk").values_list("pk", flat=True))
        total = queryset.count()
        dead_letters = list(queryset.select_related("notification").order_by("pk")[:CONFIRMATION_LISTED])
        return self._confirmation(
            request,
            dead_letters,
            action=action,
            title=f"{verb} {total} dead letter{pluralize(total)}?",
            verb=verb,
            total=total,
            select_across=select_across,
            selected_ids=selected_ids,
        )

    @admin.action(description="Retry selected dead letters", permissions=["retry"])
    def retry_selected(self, request: HttpRequest, queryset: QuerySet[DeadLetter]) -> TemplateResponse | None:
        return self._confirmed_or_ask(request, queryset, action="retry_selected", verb="Retry", then=self._retry)

    @admin.action(description="Discard selected dead letters", permissions=["retry"])
    def discard_selected(self, request: HttpRequest, queryset: QuerySet[DeadLetter]) -> TemplateResponse | None:
        return self._confirmed_or_ask(request, queryset, action="discard_selected", verb="Discard", then=self._discard)


# --- API clients (superusers only) -------------------------------------------------------------


@admin.register(ApiClient)
class ApiClientAdmin(admin.ModelAdmin):
    list_display = ("name", "token_prefix", "is_active", "created_at", "token_rotated_at")
    list_filter = ("is_active",)
    search_fields = ("name",)
    actions = ("rotate_token_selected", "revoke_selected")

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
        if obj is None:
            return ("name",)
        return ("name", "token_prefix", "is_active", "created_at", "token_rotated_at")

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> Any:
        if obj is None:
            return ()
        return ("name", "token_prefix", "is_active", "created_at", "token_rotated_at")

    def save_model(self, request: HttpRequest, obj: ApiClient, form: Any, change: bool) -> None:
        if change:
            return
        client, token = services.api_client_create(name=form.cleaned_data["name"])
        obj.pk = client.pk
        obj.__dict__.update({k: v for k, v in client.__dict__.items() if not k.startswith("_")})
        self._show_token(request, client, token)

    def _show_token(self, request: HttpRequest, client: ApiClient, token: str) -> None:
        self.message_user(
            request, f"API token for {client.name!r}: {token} (copy it now; it is not shown again)", messages.WARNING
        )

    @admin.action(description="Rotate the token of selected clients")
    def rotate_token_selected(self, request: HttpRequest, queryset: QuerySet[ApiClient]) -> None:
        for client in queryset:
            token = services.api_client_rotate_token(client=client)
            self.log_change(request, client, "Rotated token")
            self._show_token(request, client, token)

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
