"""The client API: the authenticated client's own settings (its status webhook) and its webhook secret."""

from __future__ import annotations

from drf_spectacular.utils import OpenApiResponse
from rest_framework import serializers, status
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from .. import services
from ..models import ApiClient
from ..services.inbox import inbox_allowed_origins_set
from .schema import api_operation, request_example
from .serializers import RefusesUnknownFields, StrictCharField
from .views import _client, _require_object

STATUS_WEBHOOK_HELP = (
    "Where the client's status events (notification.delivered, .failed, .dead, .suppressed, .bounced, "
    ".complained) are POSTed, signed with the webhook secret; an http(s) URL that passes the webhook channel's "
    "rules (no private, loopback or link-local address unless WEBHOOK_ALLOW_HOSTS lists it). Empty: no events."
)


ORIGINS_HELP = (
    "Web origins (scheme://host[:port]) whose pages may call the inbox API with a user token (CORS), e.g. "
    '["https://app.example.com"]; empty: only pages served by this platform.'
)
MAX_ORIGINS = 50


class ClientSerializer(serializers.ModelSerializer):  # type: ignore[type-arg]
    """The client as it sees itself; never its webhook secret (POST /client/webhook-secret makes a new one)."""

    status_webhook_url = serializers.CharField(help_text=STATUS_WEBHOOK_HELP)
    inbox_allowed_origins = serializers.ListField(child=serializers.CharField(), help_text=ORIGINS_HELP)

    class Meta:
        model = ApiClient
        fields = ["name", "token_prefix", "status_webhook_url", "inbox_allowed_origins", "created_at", "token_rotated_at"]
        read_only_fields = fields


class ClientUpdateSerializer(RefusesUnknownFields, serializers.Serializer):  # type: ignore[type-arg]
    status_webhook_url = StrictCharField(max_length=2000, allow_blank=True, required=False, help_text=STATUS_WEBHOOK_HELP)
    inbox_allowed_origins = serializers.ListField(
        child=StrictCharField(max_length=255), required=False, max_length=MAX_ORIGINS, help_text=ORIGINS_HELP
    )


class WebhookSecretSerializer(serializers.Serializer):  # type: ignore[type-arg]
    webhook_secret = serializers.CharField(
        help_text='Signs webhooks and status events (X-Signature: sha256=HMAC-SHA256 over "{X-Timestamp}.{body}"). '
        "Shown this once only."
    )


class ClientView(APIView):
    @api_operation(
        "client_retrieve",
        {200: ClientSerializer},
        summary="Get this client",
        description="The API client the token belongs to: its name, token prefix and status webhook URL.",
    )
    def get(self, request: Request) -> Response:
        return Response(ClientSerializer(_client(request)).data)

    @api_operation(
        "client_update",
        {
            200: ClientSerializer,
            400: "an inbox_allowed_origins entry is not an origin; or status_webhook_url is not an http(s) URL, or its "
            "host resolves to a private, loopback or link-local "
            "address (or does not resolve); or an unknown field. `field` names it.",
        },
        request=ClientUpdateSerializer,
        summary="Set this client's status webhook or inbox origins",
        description="Where the client's status events are POSTed (signed with the webhook secret), or empty to "
        "send none; and the web origins whose pages may show its users' in-app inboxes (CORS). Each is checked now, "
        "so a mistake is a 400 rather than lost events or refused pages later.",
        examples=[
            request_example("Send status events", {"status_webhook_url": "https://hooks.example.com/notifications"}),
            request_example("Stop status events", {"status_webhook_url": ""}),
            request_example("Let a web app show inboxes", {"inbox_allowed_origins": ["https://app.example.com"]}),
        ],
    )
    def patch(self, request: Request) -> Response:
        serializer = ClientUpdateSerializer(data=_require_object(request.data))
        serializer.is_valid(raise_exception=True)
        client = _client(request)
        if "inbox_allowed_origins" in serializer.validated_data:
            client = inbox_allowed_origins_set(client=client, origins=serializer.validated_data["inbox_allowed_origins"])
        if "status_webhook_url" in serializer.validated_data:
            client = services.api_client_set_status_webhook_url(
                client=client, url=serializer.validated_data["status_webhook_url"]
            )
        return Response(ClientSerializer(client).data)


class ClientWebhookSecretView(APIView):
    @api_operation(
        "client_webhook_secret_rotate",
        {
            201: OpenApiResponse(WebhookSecretSerializer, description="The new secret, shown this once."),
            429: "5 replaced secrets still sign (their grace periods); try again after Retry-After.",
        },
        summary="Make a new webhook secret",
        description="Makes the secret that signs this client's webhook notifications and status events, and shows "
        "it this once. Each secret it replaces signs too, as another signature, for WEBHOOK_SECRET_GRACE_SECONDS "
        "after its replacement, so a receiver can switch without a gap. No body.",
    )
    def post(self, request: Request) -> Response:
        secret = services.api_client_rotate_webhook_secret(client=_client(request))
        return Response({"webhook_secret": secret}, status=status.HTTP_201_CREATED, headers={"Cache-Control": "no-store"})
