"""Admin for message templates: variants edited inline (each checked to compile), a Preview with
sample data, and Send test to an address, both through the template services."""

from __future__ import annotations

import json
from typing import Any

from django import forms
from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied
from django.db.models import Count, QuerySet
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404
from django.template.response import TemplateResponse
from django.urls import URLPattern, path, reverse

from .. import services
from ..errors import ChannelError, ValidationFailed
from ..models import NotificationTemplate, TemplateVariant

SAMPLE_DATA_HELP = 'The template\'s variables as a JSON object, e.g. {"name": "Ann", "order_id": 42}.'


class TemplateVariantForm(forms.ModelForm):  # type: ignore[type-arg]
    class Meta:
        model = TemplateVariant
        fields = ("channel", "locale", "subject", "body", "html_body")

    def clean(self) -> dict[str, Any]:
        cleaned = super().clean() or {}
        if self.errors or cleaned.get("DELETE"):
            return cleaned
        variant = {name: cleaned.get(name) or "" for name in services.VARIANT_FIELDS}
        try:
            # The same checks as the API's PUT: a part that does not compile is refused here.
            # Support staff's own work: its turns in the render sandbox are not a client's.
            (checked,) = services.template_variants_check([variant], owner="admin")
        except ValidationFailed as exc:
            field = str(exc.extra.get("field", "")).rpartition(".")[2]
            self.add_error(field if field in services.VARIANT_FIELDS else None, exc.message.partition(": ")[2] or exc.message)
            return cleaned
        cleaned["locale"] = checked["locale"]
        return cleaned


class TemplateVariantInline(admin.StackedInline):
    model = TemplateVariant
    form = TemplateVariantForm
    extra = 0
    min_num = 1


class PlatformFilter(admin.SimpleListFilter):
    title = "owner"
    parameter_name = "owner"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        return [("platform", "Platform (every client)"), ("client", "A client's own")]

    def queryset(self, request: HttpRequest, queryset: QuerySet) -> QuerySet:
        if self.value() == "platform":
            return queryset.filter(client__isnull=True)
        if self.value() == "client":
            return queryset.filter(client__isnull=False)
        return queryset


class TemplateTryForm(forms.Form):
    variant = forms.ChoiceField(help_text="Channel and locale.")
    sample_data = forms.CharField(widget=forms.Textarea(attrs={"rows": 6, "cols": 80}), initial="{}", help_text=SAMPLE_DATA_HELP)
    to = forms.CharField(required=False, label="Send test to", help_text="An address of the variant's channel.")

    def __init__(self, *args: Any, template: NotificationTemplate, **kwargs: Any):
        super().__init__(*args, **kwargs)
        variant_field = self.fields["variant"]
        assert isinstance(variant_field, forms.ChoiceField)
        variant_field.choices = [(f"{v.channel}/{v.locale}", f"{v.channel} / {v.locale}") for v in template.variants.all()]

    def clean_sample_data(self) -> dict[str, Any]:
        try:
            data = json.loads(self.cleaned_data["sample_data"] or "{}")
        except ValueError as exc:
            raise forms.ValidationError(f"not JSON: {exc}") from None
        if not isinstance(data, dict):
            raise forms.ValidationError("a JSON object, such as {}")
        return data


@admin.register(NotificationTemplate)
class NotificationTemplateAdmin(admin.ModelAdmin):
    list_display = ("key", "owner", "variant_count", "updated_at")
    list_filter = (PlatformFilter, "client")
    list_select_related = ("client",)
    search_fields = ("key",)
    inlines = (TemplateVariantInline,)
    fields = ("key", "client")

    def get_queryset(self, request: HttpRequest) -> QuerySet[NotificationTemplate]:
        return super().get_queryset(request).annotate(variant_total=Count("variants"))

    @admin.display(description="owner", ordering="client__name")
    def owner(self, obj: NotificationTemplate) -> str:
        return str(obj.client) if obj.client_id else "platform"

    @admin.display(description="variants", ordering="variant_total")
    def variant_count(self, obj: NotificationTemplate) -> int:
        return int(getattr(obj, "variant_total", 0))

    def get_urls(self) -> list[URLPattern]:
        return [
            path(
                "<int:object_id>/try/",
                self.admin_site.admin_view(self.try_view),
                name="notifications_notificationtemplate_try",
            ),
            *super().get_urls(),
        ]

    def try_view(self, request: HttpRequest, object_id: int) -> HttpResponse:
        """Preview a variant with sample data, or send it as a test to an address."""
        template = get_object_or_404(NotificationTemplate.objects.prefetch_related("variants"), pk=object_id)
        if not self.has_view_permission(request, template):
            raise PermissionDenied
        form = TemplateTryForm(request.POST or None, template=template)
        rendered = None
        if request.method == "POST" and form.is_valid():
            channel, _, locale = form.cleaned_data["variant"].partition("/")
            if "_send_test" in request.POST:
                rendered = self._send_test(request, template, form, channel=channel, locale=locale)
            else:
                rendered = self._preview(request, template, form, channel=channel, locale=locale)
        context = {
            **self.admin_site.each_context(request),
            "opts": self.opts,
            "original": template,
            "title": f"Preview and test: {template.key}",
            "form": form,
            "rendered": rendered,
            "can_send": self.has_change_permission(request, template),
        }
        return TemplateResponse(request, "admin/notifications/notificationtemplate/try.html", context)

    def _preview(
        self, request: HttpRequest, template: NotificationTemplate, form: TemplateTryForm, *, channel: str, locale: str
    ) -> services.RenderedMessage | None:
        try:
            return services.template_variant_preview(
                template=template, channel=channel, locale=locale, data=form.cleaned_data["sample_data"]
            )
        except ValidationFailed as exc:
            self.message_user(request, f"Cannot render: {exc.message}", messages.ERROR)
            return None

    def _send_test(
        self, request: HttpRequest, template: NotificationTemplate, form: TemplateTryForm, *, channel: str, locale: str
    ) -> services.RenderedMessage | None:
        if not self.has_change_permission(request, template):
            raise PermissionDenied
        to = form.cleaned_data["to"].strip()
        if not to:
            form.add_error("to", "An address to send the test to.")
            return None
        try:
            rendered, result = services.template_send_test(
                template=template, channel=channel, locale=locale, data=form.cleaned_data["sample_data"], to=to
            )
        except (ValidationFailed, ChannelError) as exc:
            self.message_user(request, f"Test not sent: {exc.message}", messages.ERROR)
            return None
        self.log_change(request, template, f"Sent a test of {channel}/{locale} to {to}")
        self.message_user(request, f"Test sent to {to} ({result.response_summary or 'accepted'})", messages.SUCCESS)
        return rendered

    def change_view(self, request: HttpRequest, object_id: str, form_url: str = "", extra_context: Any = None) -> HttpResponse:
        extra_context = dict(extra_context or {})
        if object_id.isdigit():
            extra_context["try_url"] = reverse("admin:notifications_notificationtemplate_try", args=[object_id])
        return super().change_view(request, object_id, form_url, extra_context)
