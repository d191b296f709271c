"""Admin for dead letters: the DLQ list and page, and Retry and Discard, one by one or in bulk."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from typing import Any
from urllib.parse import urlsplit

from django.contrib import admin, messages
from django.contrib.admin import helpers
from django.core.exceptions import PermissionDenied
from django.db.models import Q, QuerySet
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.shortcuts import get_object_or_404
from django.template.defaultfilters import pluralize
from django.template.response import TemplateResponse
from django.urls import URLPattern, path, reverse
from django.utils import timezone
from django.utils.html import format_html
from django.utils.http import url_has_allowed_host_and_scheme
from django.utils.timesince import timesince
from django.views.decorators.http import require_POST

from .. import services
from ..models import DeadLetter, DeadLetterReason, DeadLetterSource, Resolution
from .base import ReadOnlyAdmin, _as_uuid, _digest_members_link, _notification_link, _pre, _pretty_json, _report

# A changelist cell says this much of the error; the page says all of it.
LIST_ERROR_CHARS = 60
# A bulk action's confirmation page lists this many rows and counts the rest.
CONFIRMATION_LISTED = 100


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
    # Narrow columns, so a row and its Retry fit 1280 px beside the filters (admin.css); the
    # source is a filter, the time it moved the age's tooltip.
    list_display = (
        "id",
        "channel",
        "reason",
        "short_error",
        "attempts",
        "age",
        "resolution_summary",
        "notification_status",
        "retry_button",
    )
    list_filter = (ResolvedFilter, "channel", "reason", "source")
    list_select_related = ("notification", "resolved_by")
    search_fields = ("id", "notification__id", "notification__address", "routing_key", "last_error")
    search_help_text = "Dead letter id, notification id, recipient address, routing key, or text of the error."
    show_full_result_count = False
    actions = ("retry_selected", "discard_selected")
    fields = (
        "source",
        "notification_link",
        "digest_link",
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

    @admin.display(description="last error")
    def short_error(self, obj: DeadLetter) -> str:
        error = obj.last_error.strip().splitlines()[0] if obj.last_error.strip() else ""
        return error[:LIST_ERROR_CHARS] + ("…" if len(error) > LIST_ERROR_CHARS else "")

    # Ascending age is newest first: the reverse of moved_at.
    @admin.display(description="age", ordering="-moved_at")
    def age(self, obj: DeadLetter) -> str:
        moved_at = timezone.localtime(obj.moved_at).strftime("%Y-%m-%d %H:%M:%S")
        return format_html('<span title="moved at {}">{}</span>', moved_at, timesince(obj.moved_at, timezone.now()))

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
        return _notification_link(obj.notification_id)

    @admin.display(description="digest")
    def digest_link(self, obj: DeadLetter) -> str:
        """A digest that could not be rendered: the digest, and the members it gathered."""
        digest_id = obj.notification.digest_id if obj.notification else None
        if digest_id is None:
            return "-"
        url = reverse("admin:notifications_digest_change", args=[digest_id])
        return format_html('<a href="{}">{}</a> ({})', url, str(digest_id)[:8], _digest_members_link(digest_id))

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
        if obj is None or obj.reason != DeadLetterReason.RENDER_FAILED:
            fields = [f for f in fields if f != "digest_link"]
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

    def retry_dead_letters(self, request: HttpRequest, dead_letters: Iterable[DeadLetter]) -> None:
        """Redrive each through the service, audited (LogEntry) and reported; also the Retry of a
        failed or dead notification's own page (admin/notifications.py)."""
        self._apply(request, dead_letters, services.dead_letter_redrive, "retried", "Retried")

    def _discard(self, request: HttpRequest, dead_letters: Iterable[DeadLetter]) -> None:
        self._apply(request, dead_letters, services.dead_letter_discard, "discarded", "Discarded")

    def retry_view(self, request: HttpRequest, object_id: int) -> HttpResponse:
        if not self.has_retry_permission(request):
            raise PermissionDenied
        dead_letter = get_object_or_404(DeadLetter, pk=object_id)
        self.retry_dead_letters(request, [dead_letter])
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
        return self._confirmed_or_ask(request, queryset, action="retry_selected", verb="Retry", then=self.retry_dead_letters)

    @admin.action(description="Discard selected dead letters", permissions=["retry"])
    def discard_selected(self, request: HttpRequest, queryset: QuerySet[DeadLetter]) -> TemplateResponse | None:
        return self._confirmed_or_ask(request, queryset, action="discard_selected", verb="Discard", then=self._discard)
