"""The broadcast API: one message to every subscriber of a topic, and its progress."""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import OpenApiParameter
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from ... import selectors, services
from ...errors import ValidationFailed
from ...models import DEFAULT_CATEGORY, Broadcast, BroadcastStatus, Channel, Priority
from ..schema import api_operation, request_example
from ..serializers import ContentRules, RefusesUnknownFields, StrictCharField, locale_field
from ..views import IDEMPOTENCY_HEADER, MAX_KEY_LENGTH, REPLAYED_HEADER, _client, _require_object

BROADCAST_ID = OpenApiParameter("broadcast_id", str, OpenApiParameter.PATH, description="The broadcast's id (a UUID).")
NOT_FOUND = "This client has no broadcast with this id."


class BroadcastCreateSerializer(ContentRules, RefusesUnknownFields, serializers.Serializer):  # type: ignore[type-arg]
    topic = StrictCharField(max_length=100, help_text="The key of one of the client's topics (PUT /topics/{key}).")
    channel = serializers.ChoiceField(choices=Channel.choices, default=Channel.EMAIL)
    channels = serializers.ListField(
        child=serializers.ChoiceField(choices=Channel.choices),
        required=False,
        min_length=1,
        max_length=len(Channel.choices),
        help_text="Instead of channel: a fallback route tried in order for each subscriber, as for a notification.",
    )
    template = StrictCharField(max_length=100, required=False, default="", help_text="Rendered per subscriber, in its locale.")
    data = serializers.DictField(required=False, default=dict, help_text="The template's variables.")  # type: ignore[assignment]
    message = StrictCharField(trim_whitespace=False, required=False, default="", help_text="Instead of template.")
    subject = StrictCharField(max_length=998, required=False, allow_blank=True, default="")
    category = StrictCharField(max_length=64, required=False, default=DEFAULT_CATEGORY)
    locale = locale_field(required=False, default="", help_text="The template's locale for everyone; default: each subscriber's.")
    metadata = serializers.DictField(required=False, default=dict, help_text="Copied to each notification.")
    priority = serializers.ChoiceField(
        choices=Priority.choices,
        default=Priority.BULK,
        help_text="bulk by default, so a broadcast never delays a transactional send.",
    )

    def to_request(self) -> services.BroadcastRequest:
        data = self.validated_data
        channels = tuple(data.get("channels") or ())
        return services.BroadcastRequest(
            topic=data["topic"],
            channel=channels[0] if channels else data["channel"],
            channels=channels,
            message=data["message"],
            subject=data["subject"],
            template=data["template"],
            data=dict(data["data"]),
            metadata=dict(data["metadata"]),
            category=data["category"],
            locale=data["locale"],
            priority=data["priority"],
        )


class BroadcastAcceptedSerializer(serializers.Serializer):  # type: ignore[type-arg]
    id = serializers.UUIDField()
    status = serializers.ChoiceField(choices=BroadcastStatus.choices)


class BroadcastSerializer(serializers.ModelSerializer):  # type: ignore[type-arg]
    topic: serializers.SlugRelatedField[Any] = serializers.SlugRelatedField(slug_field="key", read_only=True)
    category: serializers.SlugRelatedField[Any] = serializers.SlugRelatedField(slug_field="key", read_only=True)
    template = serializers.CharField(source="template_key", read_only=True)
    total = serializers.IntegerField(
        read_only=True, help_text="Subscribers when the fan-out started; once sent, the notifications it made."
    )
    created = serializers.IntegerField(read_only=True, help_text="Notifications made so far.")
    delivered = serializers.IntegerField(read_only=True)
    suppressed = serializers.IntegerField(
        read_only=True, help_text="Not sent: preferences, the suppression list, or no address (suppressed_reason)."
    )
    failed = serializers.IntegerField(read_only=True, help_text="failed or dead.")
    cancelled = serializers.IntegerField(read_only=True)
    pending = serializers.IntegerField(read_only=True, help_text="Made and not final yet (queued, held, retrying, sending).")

    class Meta:
        model = Broadcast
        fields = [
            "id", "status", "topic", "channel", "channels", "template", "subject", "category", "locale", "priority",
            "total", "created", "delivered", "suppressed", "failed", "cancelled", "pending",
            "idempotency_key", "created_at", "started_at", "finished_at", "failure_reason",
        ]  # fmt: skip
        read_only_fields = fields  # a read-only answer


def _broadcast_body(broadcast: Broadcast) -> dict[str, Any]:
    counts = selectors.broadcast_counts(broadcast_id=broadcast.pk)
    for name, value in vars(counts).items():
        setattr(broadcast, name, value)
    return dict(BroadcastSerializer(broadcast).data)


def _idempotency_header(request: Request) -> str | None:
    key = request.headers.get("Idempotency-Key")
    if key is not None and (not key or len(key) > MAX_KEY_LENGTH or not key.isprintable()):
        raise ValidationFailed(
            f"an Idempotency-Key is 1 to {MAX_KEY_LENGTH} printable characters", extra={"field": "Idempotency-Key"}
        )
    return key


class BroadcastCollectionView(APIView):
    @api_operation(
        "broadcasts_create",
        {
            202: BroadcastAcceptedSerializer,
            400: "A field or the Idempotency-Key is invalid, the topic or category unknown, the template has no variant "
            "for the channel or uses a variable data lacks; `field` names it.",
            409: "Never for a request racing another with the same Idempotency-Key (it waits and replays the first's "
            "answer): only when the key is stored without its answer (state processing) or was purged at that "
            "moment; retry shortly.",
            413: "The body is over the upload limit (DATA_UPLOAD_MAX_MEMORY_SIZE).",
            422: "The same Idempotency-Key came with a different body (or was used for a notification).",
            429: "Over the client's request rate (API_THROTTLE_RATE), or over the broadcasts it may start in an hour "
            "(code limit_exceeded, limit BROADCASTS_PER_HOUR_MAX, value its limit); Retry-After says in how many seconds "
            "to try again.",
        },
        request=BroadcastCreateSerializer,
        parameters=[IDEMPOTENCY_HEADER, REPLAYED_HEADER],
        summary="Start a broadcast",
        description="Sends one message to every recipient subscribed to a topic: a notification each, made in the "
        "background (bulk priority by default, so transactional sends go first), each subject to its recipient's "
        "preferences, quiet hours and the suppression list. Give `message` or a `template` with its `data`; one "
        "`channel`, or `channels` for a fallback route (not both). Answers at once (202); follow its counts with "
        "GET /broadcasts/{id}. A client may start BROADCASTS_PER_HOUR_MAX broadcasts an hour (429 limit_exceeded "
        "past it).",
        examples=[
            request_example(
                "A text to a topic, by email",
                {
                    "topic": "product-news",
                    "channel": "email",
                    "subject": "What's new in March",
                    "message": "Dark mode is here.",
                },
                "Once the topic product-news exists (PUT /topics/product-news).",
            ),
            request_example(
                "A template, SMS then email",
                {"topic": "product-news", "channels": ["sms", "email"], "template": "welcome", "data": {"name": "there"}},
                "A route for each subscriber: SMS to those with a phone number, else email. The template (PUT "
                "/templates/welcome) has a variant for each channel of the route.",
            ),
        ],
    )
    def post(self, request: Request) -> Response:
        payload = _require_object(request.data)
        key = _idempotency_header(request)
        serializer = BroadcastCreateSerializer(data=payload)
        serializer.is_valid(raise_exception=True)
        result = services.broadcast_create(
            client=_client(request),
            request=serializer.to_request(),
            idempotency_key=key,
            # Namespaced: the key table is shared with notifications, whose bodies must never match.
            fingerprint=services.request_fingerprint({"broadcast": payload}),
        )
        headers = {"Idempotent-Replayed": "true"} if result.replayed else {}
        return Response(result.body, status=result.status_code, headers=headers)


class BroadcastDetailView(APIView):
    @api_operation(
        "broadcasts_retrieve",
        {200: BroadcastSerializer, 404: NOT_FOUND},
        parameters=[BROADCAST_ID],
        summary="Get a broadcast",
        description="Its status and counts: subscribers, notifications made, delivered, suppressed, failed, "
        "cancelled and still pending. The notifications themselves: GET /notifications?broadcast={id}.",
    )
    def get(self, request: Request, broadcast_id: str) -> Response:
        broadcast = selectors.broadcast_get(client=_client(request), broadcast_id=broadcast_id)
        return Response(_broadcast_body(broadcast))


class BroadcastCancelView(APIView):
    @api_operation(
        "broadcasts_cancel",
        {200: BroadcastSerializer, 404: NOT_FOUND, 409: "It is cancelled already."},
        parameters=[BROADCAST_ID],
        summary="Cancel a broadcast",
        description="Stops the fan-out and cancels its notifications not sent yet; those already sent stay sent. No body.",
    )
    def post(self, request: Request, broadcast_id: str) -> Response:
        broadcast, _ = services.broadcast_cancel(client=_client(request), broadcast_id=broadcast_id)
        return Response(_broadcast_body(broadcast))
