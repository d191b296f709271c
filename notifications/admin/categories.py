"""Admin for categories: the platform's (shared by every client) and each client's own."""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import admin
from django.http import HttpRequest

from .. import services
from ..errors import ValidationFailed
from ..models import Category


class CategoryForm(forms.ModelForm):
    class Meta:
        model = Category
        fields = ("key", "client", "critical", "default_enabled", "max_per_recipient")

    def clean_max_per_recipient(self) -> Any:
        try:
            return services.recipient_cap_check(self.cleaned_data.get("max_per_recipient"))
        except ValidationFailed as exc:
            raise forms.ValidationError(exc.message) from None


@admin.register(Category)
class CategoryAdmin(admin.ModelAdmin):
    form = CategoryForm
    list_display = ("key", "owner", "critical", "default_enabled", "max_per_recipient", "updated_at")
    list_filter = ("critical", "default_enabled", "client")
    list_select_related = ("client",)
    search_fields = ("key",)
    fields = ("key", "client", "critical", "default_enabled", "max_per_recipient")

    @admin.display(description="owner", ordering="client__name")
    def owner(self, obj: Category) -> str:
        return str(obj.client) if obj.client_id else "platform"

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        # Notifications keep their category (PROTECT); a category is retired by making it opt-in.
        return False
