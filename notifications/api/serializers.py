"""Request shapes (checked here) and response shapes of the API."""

from __future__ import annotations

import json
import math
from typing import Any

from rest_framework import serializers

from ..channels.addresses import MAX_PUSH_TOKEN_LENGTH
from ..models import Channel, DeliveryAttempt, Notification, Priority, Recipient, Status
from ..services import NotificationRequest

# Metadata is stored with the notification and echoed by every read; it is context, not a payload.
MAX_METADATA_BYTES = 16 * 1024
MAX_METADATA_DEPTH = 32  # the metadata object itself is the first level


def metadata_problem(metadata: dict[str, Any]) -> str | None:
    """Why ``metadata`` cannot be accepted, or None: what jsonb refuses, or over our limits.

    PostgreSQL's jsonb refuses \\u0000, a lone UTF-16 surrogate and Infinity/NaN (what a number too
    large for a float, like 1e999, parses to); each was a 500 from the INSERT. The walk is iterative
    and bounded in depth and in steps, so a hostile body costs little and never recurses.
    """
    pending: list[tuple[Any, int]] = [(metadata, 1)]
    steps = 0
    while pending:
        steps += 1
        if steps > MAX_METADATA_BYTES:
            # Every key and value takes at least one byte of JSON, so the size check would fail anyway.
            return f"metadata is over {MAX_METADATA_BYTES} bytes as JSON; the limit is {MAX_METADATA_BYTES}"
        value, depth = pending.pop()
        if isinstance(value, str):
            if "\x00" in value:
                return "metadata may not contain NUL (\\u0000) characters"
            if not value.isascii() and not _is_utf8_encodable(value):
                return "metadata may not contain a lone UTF-16 surrogate (\\ud800-\\udfff) in a key or value"
        elif isinstance(value, float):
            if not math.isfinite(value):
                return "metadata may hold only finite numbers, not NaN or Infinity (nor one too large, like 1e999)"
        elif isinstance(value, (dict, list)):
            if depth > MAX_METADATA_DEPTH:
                return f"metadata may nest objects and arrays at most {MAX_METADATA_DEPTH} levels deep"
            if isinstance(value, dict):
                pending.extend((key, depth) for key in value)
                pending.extend((item, depth + 1) for item in value.values())
            else:
                pending.extend((item, depth + 1) for item in value)
    size = len(json.dumps(metadata, ensure_ascii=False, allow_nan=False, separators=(",", ":")).encode())
    if size > MAX_METADATA_BYTES:
        return f"metadata is {size} bytes as JSON; the limit is {MAX_METADATA_BYTES}"
    return None


def _is_utf8_encodable(text: str) -> bool:
    try:
        text.encode()
    except UnicodeEncodeError:
        return False
    return True


class NotificationCreateSerializer(serializers.Serializer):  # type: ignore[type-arg]
    user_id = serializers.CharField(max_length=255)
    message = serializers.CharField(trim_whitespace=False)
    channel = serializers.ChoiceField(choices=Channel.choices, default=Channel.EMAIL)
    subject = serializers.CharField(max_length=998, required=False, allow_blank=True, default="")
    to = serializers.CharField(
        max_length=2000,
        required=False,
        allow_blank=True,
        default="",
        help_text="Address override; otherwise the recipient's stored address is used.",
    )
    metadata = serializers.DictField(required=False, default=dict)
    priority = serializers.ChoiceField(choices=Priority.choices, default=Priority.HIGH)
    send_at = serializers.DateTimeField(required=False, allow_null=True, default=None)
    idempotency_key = serializers.CharField(
        max_length=255, required=False, allow_blank=False, help_text="Alternative to the Idempotency-Key header."
    )

    def validate_subject(self, value: str) -> str:
        if "\r" in value or "\n" in value:
            raise serializers.ValidationError("a subject is one line (no CR or LF)")
        return value

    def validate_metadata(self, value: dict[str, Any]) -> dict[str, Any]:
        problem = metadata_problem(value)
        if problem:
            raise serializers.ValidationError(problem)
        return value

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        # A misspelt optional field (say "sned_at") would otherwise be dropped and the message sent now.
        unknown = sorted(set(self.initial_data) - set(self.fields))
        if unknown:
            raise serializers.ValidationError({unknown[0]: [f"unknown field; expected one of {', '.join(self.fields)}"]})
        return attrs

    def to_request(self) -> NotificationRequest:
        data = self.validated_data
        return NotificationRequest(
            user_id=data["user_id"],
            message=data["message"],
            channel=data["channel"],
            subject=data["subject"],
            to=data["to"],
            metadata=dict(data["metadata"]),
            priority=data["priority"],
            send_at=data["send_at"],
        )


class AcceptedSerializer(serializers.Serializer):  # type: ignore[type-arg]
    id = serializers.UUIDField()
    status = serializers.ChoiceField(choices=Status.choices)
    idempotency_key = serializers.CharField()


class BatchCreateSerializer(serializers.Serializer):  # type: ignore[type-arg]
    notifications = NotificationCreateSerializer(many=True, help_text="Up to 100; each may carry its own idempotency_key.")


class AttemptSerializer(serializers.ModelSerializer):  # type: ignore[type-arg]
    class Meta:
        model = DeliveryAttempt
        fields = ["number", "outcome", "started_at", "finished_at", "duration_ms", "error_class", "error_message"]


class NotificationSerializer(serializers.ModelSerializer):  # type: ignore[type-arg]
    to = serializers.CharField(source="address")

    class Meta:
        model = Notification
        fields = [
            "id",
            "status",
            "channel",
            "user_id",
            "to",
            "subject",
            "message",
            "metadata",
            "priority",
            "send_at",
            "attempt_count",
            "last_error",
            "idempotency_key",
            "trace_id",
            "created_at",
            "updated_at",
            "delivered_at",
        ]


class NotificationDetailSerializer(NotificationSerializer):
    attempts = AttemptSerializer(many=True, read_only=True)

    class Meta(NotificationSerializer.Meta):
        fields = [*NotificationSerializer.Meta.fields, "attempts"]


class NotificationFilterSerializer(serializers.Serializer):  # type: ignore[type-arg]
    status = serializers.ChoiceField(choices=Status.choices, required=False)
    channel = serializers.ChoiceField(choices=Channel.choices, required=False)
    user_id = serializers.CharField(required=False)
    created_after = serializers.DateTimeField(required=False)
    created_before = serializers.DateTimeField(required=False)


class RecipientSerializer(serializers.ModelSerializer):  # type: ignore[type-arg]
    push_tokens = serializers.ListField(
        child=serializers.CharField(max_length=MAX_PUSH_TOKEN_LENGTH), required=False, default=list, max_length=100
    )

    class Meta:
        model = Recipient
        fields = ["user_id", "email", "phone", "push_tokens", "webhook_url", "locale", "timezone", "created_at", "updated_at"]
        read_only_fields = ["user_id", "created_at", "updated_at"]
        extra_kwargs: dict[str, Any] = {
            "email": {"required": False},
            "phone": {"required": False},
            "webhook_url": {"required": False},
            "locale": {"required": False},
            "timezone": {"required": False},
        }

    def validate_timezone(self, value: str) -> str:
        import zoneinfo

        if value:
            try:
                zoneinfo.ZoneInfo(value)
            except (zoneinfo.ZoneInfoNotFoundError, ValueError):
                raise serializers.ValidationError(f"{value!r} is not an IANA time zone (e.g. Europe/Paris)") from None
        return value
