"""The category API: a client's categories, which recipients' preferences and quiet hours are about."""

from __future__ import annotations

from drf_spectacular.utils import OpenApiExample, OpenApiParameter, OpenApiResponse
from rest_framework import serializers, status
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from ... import selectors, services
from ...errors import NotFound
from ...models import Category
from ..auth import IsApiClient, LiveTokenWrites
from ..schema import api_operation, request_example
from ..serializers import RefusesUnknownFields, StrictBooleanField, StrictIntegerField
from ..views import _client, _require_object

CATEGORY_KEY = OpenApiParameter(
    "key",
    str,
    OpenApiParameter.PATH,
    pattern=r"^[-a-zA-Z0-9_]{1,64}$",
    description="A slug, e.g. marketing.",
    examples=[OpenApiExample("marketing", value="marketing")],
)


class RecipientCapSerializer(RefusesUnknownFields, serializers.Serializer):  # type: ignore[type-arg]
    count = StrictIntegerField(min_value=1, max_value=services.MAX_CAP_COUNT)
    per_seconds = StrictIntegerField(min_value=1, max_value=services.MAX_CAP_SECONDS, help_text="The window, e.g. 3600.")


class CategorySerializer(RefusesUnknownFields, serializers.ModelSerializer):  # type: ignore[type-arg]
    critical = StrictBooleanField(
        required=False, default=False, help_text="Sent whatever the preferences and quiet hours say (security codes)."
    )
    default_enabled = StrictBooleanField(
        required=False, default=True, help_text="false: an opt-in category, sent only to recipients who opted in."
    )
    max_per_recipient = RecipientCapSerializer(
        required=False,
        allow_null=True,
        default=None,
        help_text="At most count notifications of this category to one recipient in any per_seconds; past it one is "
        "suppressed (suppressed_reason throttled). null: no cap. A critical category is never capped.",
    )
    platform = serializers.SerializerMethodField(
        help_text="True for a platform category (made by migration or in the admin, shared by every client), "
        "which a PUT of its key replaces for this client only."
    )

    class Meta:
        model = Category
        fields = ["key", "critical", "default_enabled", "max_per_recipient", "platform", "created_at", "updated_at"]
        read_only_fields = ["key", "created_at", "updated_at"]

    def get_platform(self, category: Category) -> bool:
        return category.client_id is None


class CategoryView(APIView):
    permission_classes = [IsApiClient, LiveTokenWrites]

    @api_operation(
        "categories_retrieve",
        {200: CategorySerializer, 404: "Neither this client nor the platform has a category with this key."},
        parameters=[CATEGORY_KEY],
        summary="Get a category",
        description="The category with this key: this client's own, else the platform's (platform true).",
    )
    def get(self, request: Request, key: str) -> Response:
        category = selectors.category_get(client=_client(request), key=key)
        if category is None:
            raise NotFound(f"no category {key!r}")
        return Response(CategorySerializer(category).data)

    @api_operation(
        "categories_upsert",
        {
            200: OpenApiResponse(CategorySerializer, description="Replaced."),
            201: OpenApiResponse(CategorySerializer, description="Created (also when it shadows a platform category)."),
            403: "A test token: templates and categories are shared with live mode, changed with the live token.",
            400: "The key or a field is invalid; `field` names it.",
        },
        request=CategorySerializer,
        parameters=[CATEGORY_KEY],
        summary="Create or replace a category",
        description="A category says what notifications are about, for the recipients' preferences: sent unless "
        "opted out (default_enabled true) or only to those who opted in (false); critical ones are sent whatever the "
        "preferences and quiet hours say; max_per_recipient caps how many one recipient gets. A platform category's "
        "key makes this client's own, which replaces it for this client only.",
        examples=[
            request_example(
                "Opt-out marketing, at most 3 a day",
                {"critical": False, "default_enabled": True, "max_per_recipient": {"count": 3, "per_seconds": 86400}},
            )
        ],
    )
    def put(self, request: Request, key: str) -> Response:
        serializer = CategorySerializer(data=_require_object(request.data))
        serializer.is_valid(raise_exception=True)
        category, created = services.category_upsert(
            client=_client(request),
            key=key,
            critical=serializer.validated_data["critical"],
            default_enabled=serializer.validated_data["default_enabled"],
            max_per_recipient=serializer.validated_data["max_per_recipient"],
        )
        return Response(CategorySerializer(category).data, status=status.HTTP_201_CREATED if created else status.HTTP_200_OK)
