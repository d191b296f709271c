"""The preferences API: what a recipient opted out of (or into), by channel and by category."""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from ... import selectors, services
from ...channels import CHANNEL_NAMES
from ...models import Recipient
from ..schema import api_operation, request_example
from ..serializers import RefusesUnknownFields, StrictBooleanField
from ..views import USER_ID, _client, _path_user_id, _require_object

# {"sms": false}: each channel the registry declares, true or false.
CHANNELS_SCHEMA = {
    "type": "object",
    "properties": {channel: {"type": "boolean"} for channel in CHANNEL_NAMES},
    "additionalProperties": False,
}


class ChannelPreferencesSerializer(RefusesUnknownFields, serializers.Serializer):  # type: ignore[type-arg]
    """Per channel, true (allowed) or false (opted out); a channel left out says nothing."""

    def get_fields(self) -> dict[str, serializers.Field]:  # type: ignore[type-arg]
        return {channel: StrictBooleanField(required=False) for channel in CHANNEL_NAMES}


@extend_schema_field({"type": "object", "additionalProperties": {"oneOf": [{"type": "boolean"}, CHANNELS_SCHEMA]}})
class CategoryPreferencesField(serializers.DictField):  # type: ignore[type-arg]
    """Per category key: true, false, or per channel. The keys must be categories the client knows,
    which services.preferences_check checks (naming categories.<key>)."""


class UnsubscribedSerializer(serializers.Serializer):  # type: ignore[type-arg]
    category = serializers.CharField()
    channel = serializers.CharField()
    at = serializers.DateTimeField()


class PreferencesSerializer(RefusesUnknownFields, serializers.Serializer):  # type: ignore[type-arg]
    channels = ChannelPreferencesSerializer(required=False, default=dict, help_text='e.g. {"sms": false}')
    categories = CategoryPreferencesField(
        required=False, default=dict, help_text='e.g. {"marketing": false, "order_updates": {"sms": false}}'
    )
    unsubscribed = UnsubscribedSerializer(
        many=True,
        read_only=True,
        help_text="The category+channel opt-outs above that came from a one-click unsubscribe (suppressed_reason "
        "unsubscribed); a PUT keeps each only while it still opts out of that pair. Ignored in a PUT.",
    )


def _preferences(recipient: Recipient | None) -> dict[str, Any]:
    stored = (recipient.preferences if recipient else None) or {}
    return {
        "channels": stored.get("channels") or {},
        "categories": stored.get("categories") or {},
        "unsubscribed": stored.get("unsubscribed") or [],
    }


class PreferencesView(APIView):
    @api_operation(
        "recipients_preferences_retrieve",
        {200: PreferencesSerializer, 400: "The user_id is over 255 characters."},
        parameters=[USER_ID],
        summary="Get a recipient's preferences",
        description="What the recipient opted out of (or into), by channel and by category, and which of those "
        "came from a one-click unsubscribe. A recipient never stored has none: every category's default holds.",
    )
    def get(self, request: Request, user_id: str) -> Response:
        recipient = selectors.recipient_get(client=_client(request), user_id=_path_user_id(user_id))
        # A recipient nobody stored has preferences too: none, so every category's default holds.
        return Response(PreferencesSerializer(_preferences(recipient)).data)

    @api_operation(
        "recipients_preferences_replace",
        {
            200: PreferencesSerializer,
            400: "An unknown channel or category, or a value that is not true, false or an object of channels; "
            "`field` names it, e.g. categories.order_updates.sms.",
        },
        request=PreferencesSerializer,
        parameters=[USER_ID],
        summary="Replace a recipient's preferences",
        description="Replaces them all: per channel true or false, per category key true, false or per channel. "
        "A notification they forbid is not sent (status suppressed, suppressed_reason preference) unless its "
        "category is critical.",
        examples=[
            request_example(
                "No SMS, no marketing",
                {"channels": {"sms": False}, "categories": {"marketing": False}},
                "Once the category marketing exists (PUT /categories/marketing).",
            )
        ],
    )
    def put(self, request: Request, user_id: str) -> Response:
        serializer = PreferencesSerializer(data=_require_object(request.data))
        serializer.is_valid(raise_exception=True)
        recipient, _ = services.recipient_preferences_replace(
            client=_client(request),
            user_id=_path_user_id(user_id),
            channels=dict(serializer.validated_data["channels"]),
            categories=serializer.validated_data["categories"],
        )
        return Response(PreferencesSerializer(_preferences(recipient)).data)
