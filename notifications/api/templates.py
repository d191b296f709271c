"""The template API: replace and read a client's template and its variants, preview a rendering."""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import OpenApiExample, OpenApiParameter, OpenApiResponse
from rest_framework import serializers, status
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from .. import selectors, services
from ..errors import NotFound
from ..models import Channel, NotificationTemplate, TemplateVariant
from ..services.policy.templates import MAX_VARIANTS
from .auth import IsApiClient, LiveTokenWrites
from .schema import api_operation, request_example
from .serializers import RefusesUnknownFields, StrictCharField, locale_field, metadata_problem
from .views import _client, _require_object

# Template and category keys are slugs (services/policy/preferences.py key_check says the same).
KEY_PATTERN = r"^[-a-zA-Z0-9_]{1,100}$"
TEMPLATE_KEY = OpenApiParameter(
    "key",
    str,
    OpenApiParameter.PATH,
    pattern=KEY_PATTERN,
    description="A slug, e.g. welcome.",
    examples=[OpenApiExample("welcome", value="welcome")],
)


class TemplateVariantSerializer(RefusesUnknownFields, serializers.ModelSerializer):  # type: ignore[type-arg]
    locale = locale_field(help_text="e.g. en, fr, fr-CA; rendering falls back fr-CA -> fr -> DEFAULT_LOCALE.")
    subject = StrictCharField(
        max_length=998, required=False, allow_blank=True, default="", help_text="Email subject, push title; one line."
    )
    body = StrictCharField(trim_whitespace=False, help_text="Text, Django template language, not autoescaped.")
    html_body = StrictCharField(
        trim_whitespace=False,
        required=False,
        allow_blank=True,
        default="",
        help_text="Email only, optional: sent as multipart (text + HTML); autoescaped.",
    )

    class Meta:
        model = TemplateVariant
        fields = ["channel", "locale", "subject", "body", "html_body"]


class TemplateSerializer(serializers.ModelSerializer):  # type: ignore[type-arg]
    variants = TemplateVariantSerializer(many=True, read_only=True)
    platform = serializers.SerializerMethodField(
        help_text="True for a platform template (the admin's, shared by every client) used because this client has none of its own."
    )

    class Meta:
        model = NotificationTemplate
        fields = ["key", "platform", "variants", "created_at", "updated_at"]

    def get_platform(self, template: NotificationTemplate) -> bool:
        return template.client_id is None


class VariantsField(serializers.ListField):  # type: ignore[type-arg]
    """The variants as sent: services.template_variants_check checks each and names it
    variants[i].field, as it does for the admin; the child serializer is here for the schema."""

    def run_child_validation(self, data: list[Any]) -> list[Any]:
        return list(data)


class TemplateReplaceSerializer(RefusesUnknownFields, serializers.Serializer):  # type: ignore[type-arg]
    variants = VariantsField(
        child=TemplateVariantSerializer(),
        min_length=1,
        max_length=MAX_VARIANTS,
        help_text="Every variant of the template, one per channel and locale; those not listed are removed.",
    )


class TemplatePreviewSerializer(RefusesUnknownFields, serializers.Serializer):  # type: ignore[type-arg]
    channel = serializers.ChoiceField(choices=Channel.choices, default=Channel.EMAIL)
    locale = locale_field(required=False, default="", help_text="Default: DEFAULT_LOCALE.")
    # DRF's metaclass takes declared fields off the class, so this does not hide Serializer.data.
    data = serializers.DictField(required=False, default=dict, help_text="The template's variables.")  # type: ignore[assignment]

    def validate_data(self, value: dict[str, Any]) -> dict[str, Any]:
        problem = metadata_problem(value, name="data")
        if problem:
            raise serializers.ValidationError(problem)
        return value


class TemplateRenderingSerializer(serializers.Serializer):  # type: ignore[type-arg]
    subject = serializers.CharField()
    body = serializers.CharField()
    html_body = serializers.CharField(help_text="Empty when the variant has no HTML.")
    locale = serializers.CharField(help_text="The locale of the variant used.")


NO_TEMPLATE = "Neither this client nor the platform has a template with this key."


class TemplateView(APIView):
    permission_classes = [IsApiClient, LiveTokenWrites]

    @api_operation(
        "templates_retrieve",
        {200: TemplateSerializer, 404: NO_TEMPLATE},
        parameters=[TEMPLATE_KEY],
        summary="Get a template",
        description="The template with this key and its variants: this client's own, else the platform's (platform true).",
    )
    def get(self, request: Request, key: str) -> Response:
        template = selectors.template_get(client=_client(request), key=key)
        if template is None:
            raise NotFound(f"no template {key!r}")
        return Response(TemplateSerializer(template).data)

    @api_operation(
        "templates_replace",
        {
            200: OpenApiResponse(TemplateSerializer, description="Its variants replaced."),
            201: OpenApiResponse(TemplateSerializer, description="Created."),
            403: "A test token: templates and categories are shared with live mode, changed with the live token.",
            400: "The key, or a variant: a part that does not compile or uses what a template may not, a second variant of one channel and locale, "
            "html_body not for email, a subject with a line break, an empty body; `field` names it, e.g. variants[0].body.",
        },
        request=TemplateReplaceSerializer,
        parameters=[TEMPLATE_KEY],
        summary="Create or replace a template",
        description="Stores every variant of the template, one per channel and locale, written in the Django "
        "template language with variables from a notification's data ({{ name }}); a variant not listed is "
        "removed. Each part is compiled and checked now, so a mistake is a 400 naming it, not a failed send later.",
        examples=[
            request_example(
                "Email and SMS in English",
                {
                    "variants": [
                        {
                            "channel": "email",
                            "locale": "en",
                            "subject": "Welcome, {{ name }}",
                            "body": "Hello {{ name }}, thank you for signing up.",
                            "html_body": "<p>Hello {{ name }}, thank you for signing up.</p>",
                        },
                        {"channel": "sms", "locale": "en", "body": "Hello {{ name }}, welcome aboard."},
                    ]
                },
            )
        ],
    )
    def put(self, request: Request, key: str) -> Response:
        serializer = TemplateReplaceSerializer(data=_require_object(request.data))
        serializer.is_valid(raise_exception=True)
        template, created = services.template_replace(
            client=_client(request), key=key, variants=serializer.validated_data["variants"]
        )
        template = NotificationTemplate.objects.prefetch_related("variants").get(pk=template.pk)
        return Response(TemplateSerializer(template).data, status=status.HTTP_201_CREATED if created else status.HTTP_200_OK)


class TemplatePreviewView(APIView):
    @api_operation(
        "templates_preview",
        {
            200: TemplateRenderingSerializer,
            400: "No variant for the channel (in the locale or its fallbacks), or a variable the template uses "
            "is missing from data (`field` is data.<name>); code template_render_failed when it raised while "
            "rendering with this data, render_limit when the render went past its time or output bound "
            "(TEMPLATE_RENDER_SECONDS, MAX_MESSAGE_BYTES).",
            404: NO_TEMPLATE,
        },
        request=TemplatePreviewSerializer,
        parameters=[TEMPLATE_KEY],
        summary="Preview a template",
        description="Renders the template for a channel and locale with the data given, as a notification would be, "
        "without sending anything.",
        examples=[
            request_example(
                "The email in English",
                {"channel": "email", "locale": "en", "data": {"name": "Ann"}},
                "Once the template welcome exists (PUT /templates/welcome).",
            )
        ],
    )
    def post(self, request: Request, key: str) -> Response:
        serializer = TemplatePreviewSerializer(data=_require_object(request.data))
        serializer.is_valid(raise_exception=True)
        client = _client(request)
        if selectors.template_get(client=client, key=key) is None:
            raise NotFound(f"no template {key!r}")
        rendered = services.template_preview(client=client, key=key, **serializer.validated_data)
        return Response(TemplateRenderingSerializer(rendered).data)
