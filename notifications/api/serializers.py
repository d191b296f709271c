"""Request shapes (checked here) and response shapes of the API."""

from __future__ import annotations

from typing import Any

from django.db import models
from rest_framework import serializers

from .. import services
from ..channels.addresses import MAX_PUSH_TOKEN_LENGTH
from ..models import DEFAULT_CATEGORY, Channel, DeliveryAttempt, Notification, Priority, Recipient, Status
from ..services import NotificationRequest
from .fields import (  # noqa: F401  (re-exported: other API modules and tests import them from here)
    MAX_BATCH,
    MAX_METADATA_BYTES,
    MAX_METADATA_DEPTH,
    InAppFields,
    RefusesUnknownFields,
    ReusedFields,
    StrictBooleanField,
    StrictCharField,
    StrictEmailField,
    StrictRegexField,
    StrictURLField,
    locale_field,
    metadata_problem,
)


class StrictIntegerField(serializers.IntegerField):
    """JSON whole numbers only: DRF reads "5" and 5.0 as 5 too."""

    def to_internal_value(self, data: Any) -> int:
        if isinstance(data, bool) or not isinstance(data, int):
            raise serializers.ValidationError("must be a whole number", code="invalid")
        return int(super().to_internal_value(data))


class DigestSerializer(RefusesUnknownFields, serializers.Serializer):  # type: ignore[type-arg]
    key = StrictCharField(min_length=1, max_length=services.MAX_DIGEST_KEY_LENGTH, help_text="What gathers them, e.g. comments.")
    window_seconds = StrictIntegerField(
        min_value=1, max_value=services.MAX_DIGEST_WINDOW_SECONDS, help_text="How long the digest gathers from its first."
    )
    max_items = StrictIntegerField(
        min_value=1,
        max_value=services.MAX_DIGEST_ITEMS,
        required=False,
        default=services.DEFAULT_DIGEST_MAX_ITEMS,
        help_text="Sent as soon as this many have joined.",
    )


# The checks every request that makes notifications shares (one notification, a broadcast): a
# one-line subject, metadata and data PostgreSQL can store, message or template, channel or
# channels. A comment, not a docstring: drf-spectacular showed it as the broadcast request's
# description.
class ContentRules:
    initial_data: Any

    def validate_subject(self, value: str) -> str:
        if "\r" in value or "\n" in value:
            raise serializers.ValidationError("a subject is one line (no CR or LF)")
        return value

    def validate_metadata(self, value: dict[str, Any]) -> dict[str, Any]:
        problem = metadata_problem(value)
        if problem:
            raise serializers.ValidationError(problem)
        return value

    def validate_data(self, value: dict[str, Any]) -> dict[str, Any]:
        # Rendered into text columns, where PostgreSQL refuses what jsonb refuses.
        problem = metadata_problem(value, name="data")
        if problem:
            raise serializers.ValidationError(problem)
        return value

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        if bool(attrs.get("message")) == bool(attrs.get("template")):
            field = "template" if attrs.get("message") else "message"
            raise serializers.ValidationError({field: ["give either message, or template with data (not both)"]})
        if "channels" in attrs:
            if "channel" in self.initial_data:
                raise serializers.ValidationError({"channels": ["give either channel or channels (not both)"]})
            if len(set(attrs["channels"])) != len(attrs["channels"]):
                raise serializers.ValidationError({"channels": ["each channel at most once"]})
        return attrs


class NotificationCreateSerializer(ReusedFields, ContentRules, RefusesUnknownFields, InAppFields):  # type: ignore[type-arg]
    user_id = StrictCharField(max_length=255)
    message = StrictCharField(
        trim_whitespace=False, required=False, default="", help_text="The text to send; or give template and data instead."
    )
    channel = serializers.ChoiceField(choices=Channel.choices, default=Channel.EMAIL)
    channels = serializers.ListField(
        child=serializers.ChoiceField(choices=Channel.choices),
        required=False,
        min_length=1,
        max_length=len(Channel.choices),
        help_text='Instead of channel: a fallback route, e.g. ["push", "sms", "email"], tried in order until one '
        "delivers, each to the recipient's stored address (not with to). A channel without an address, opted out of or "
        "suppressed is skipped.",
    )
    subject = StrictCharField(max_length=998, required=False, allow_blank=True, default="")
    to = StrictCharField(
        max_length=2000,
        required=False,
        allow_blank=True,
        default="",
        help_text="The address on `channel`: an email address, an E.164 phone number, a push device token or an http(s) "
        "URL. Left out, the recipient's stored address for the channel is used (a 400 naming `to` when none is stored).",
    )
    metadata = serializers.DictField(required=False, default=dict)
    priority = serializers.ChoiceField(choices=Priority.choices, default=Priority.HIGH)
    send_at = serializers.DateTimeField(required=False, allow_null=True, default=None)
    idempotency_key = StrictCharField(
        max_length=255, required=False, allow_blank=False, help_text="Alternative to the Idempotency-Key header."
    )
    template = StrictCharField(
        max_length=100,
        required=False,
        default="",
        help_text="Key of a template (PUT /templates/{key}) to render the message from with data; instead of message. "
        "subject, when given, overrides the template's.",
    )
    # DRF's metaclass takes declared fields off the class, so this does not hide Serializer.data.
    data = serializers.DictField(required=False, default=dict, help_text="The template's variables.")  # type: ignore[assignment]
    category = StrictCharField(
        max_length=64,
        required=False,
        default=DEFAULT_CATEGORY,
        help_text="What it is about, for the recipient's preferences and quiet hours (PUT /categories/{key}).",
    )
    locale = locale_field(
        required=False,
        default="",
        help_text="The template's locale, e.g. fr-CA (then fr, then DEFAULT_LOCALE); default: the recipient's.",
    )
    digest = DigestSerializer(
        required=False,
        allow_null=True,
        default=None,
        help_text="Gather with the recipient's other notifications of the same key: the first opens a digest, later ones "
        "in its window join it (status digested) and one notification is sent when the window ends or max_items "
        "joined, rendered from template with items (each one's data) and count. Needs template; not with send_at.",
    )

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        attrs = super().validate(attrs)
        if "data" in self.initial_data and not attrs.get("template"):
            raise serializers.ValidationError({"data": ["data is for a template; give template too"]})
        return attrs

    def to_request(self) -> NotificationRequest:
        data = self.validated_data
        return NotificationRequest(
            user_id=data["user_id"],
            message=data["message"],
            channel=data["channels"][0] if data.get("channels") else data["channel"],
            channels=tuple(data.get("channels") or ()),
            subject=data["subject"],
            to=data["to"],
            metadata=dict(data["metadata"]),
            priority=data["priority"],
            send_at=data["send_at"],
            template=data["template"],
            data=dict(data["data"]),
            category=data["category"],
            locale=data["locale"],
            digest=services.DigestRequest(**data["digest"]) if data.get("digest") else None,
            action_url=data["action_url"],
            thread_key=data["thread_key"],
        )


class AcceptedSerializer(serializers.Serializer):  # type: ignore[type-arg]
    id = serializers.UUIDField()
    status = serializers.ChoiceField(choices=Status.choices)
    idempotency_key = serializers.CharField()


class BatchItemsField(serializers.ListField):  # type: ignore[type-arg]
    """The batch's list, checked as a list of 1 to MAX_BATCH; its items come back as sent.

    Each item is validated and accepted on its own, so a bad item is its own 400 slot instead of
    failing the batch; the child serializer is here for the schema, which shows what an item is.
    """

    def run_child_validation(self, data: list[Any]) -> list[Any]:
        return list(data)


class BatchCreateSerializer(serializers.Serializer):  # type: ignore[type-arg]
    notifications = BatchItemsField(
        child=NotificationCreateSerializer(),
        min_length=1,
        max_length=MAX_BATCH,
        help_text=f"1 to {MAX_BATCH}; each may carry its own idempotency_key.",
        error_messages={
            key: f"a list of 1 to {MAX_BATCH} notifications" for key in ("not_a_list", "empty", "min_length", "max_length")
        },
    )


class ErrorDetailSerializer(serializers.Serializer):  # type: ignore[type-arg]
    code = serializers.CharField(help_text="Machine-readable, e.g. invalid, not_found, throttled, unavailable.")
    message = serializers.CharField(help_text="For people; may change between versions.")
    field = serializers.CharField(required=False, help_text="The body field, parameter or header at fault, when one is.")
    details = serializers.JSONField(required=False, help_text="Every field's problems, on a validation error.")


class ErrorSerializer(serializers.Serializer):  # type: ignore[type-arg]
    """Every error answer of the API has this one shape (what api/exceptions.py's error_body builds)."""

    error = ErrorDetailSerializer()


class BatchItemResultSerializer(serializers.Serializer):  # type: ignore[type-arg]
    status = serializers.IntegerField(help_text="The HTTP status this item would have had on its own.")
    body = AcceptedSerializer(required=False, help_text="When accepted (202).")
    error = ErrorDetailSerializer(required=False, help_text="When not accepted.")


class BatchResultSerializer(serializers.Serializer):  # type: ignore[type-arg]
    results = BatchItemResultSerializer(many=True, help_text="One per item, in the order sent.")


class AttemptSerializer(serializers.ModelSerializer):  # type: ignore[type-arg]
    class Meta:
        model = DeliveryAttempt
        fields = [
            "number", "outcome", "channel", "account", "started_at", "finished_at", "duration_ms", "error_class", "error_message",
        ]  # fmt: skip
        extra_kwargs: dict[str, Any] = {
            "channel": {"help_text": "The channel this try went through (a fallback route changes channels)."},
            "account": {"help_text": "The provider account it was sent from (provider failover changes accounts)."},
        }


class RouteEntrySerializer(serializers.Serializer):  # type: ignore[type-arg]
    channel = serializers.ChoiceField(choices=Channel.choices)
    outcome = serializers.ChoiceField(choices=["pending", "skipped", "failed", "delivered"])
    reason = serializers.CharField(
        allow_blank=True,
        help_text="Why skipped (no_address, preference, unsubscribed, default_off, a suppression) or failed "
        "(permanent_error, retries_exhausted).",
    )


class NotificationSerializer(serializers.ModelSerializer):  # type: ignore[type-arg]
    to = serializers.CharField(source="address")
    category: serializers.SlugRelatedField[Any] = serializers.SlugRelatedField(slug_field="key", read_only=True, allow_null=True)
    template = serializers.CharField(source="template_key", read_only=True, help_text="The template it was rendered from.")
    scheduled_for = serializers.DateTimeField(
        read_only=True,
        allow_null=True,
        help_text="While pending, when it is next tried: send_at, a retry, or the end of the recipient's quiet hours.",
    )
    digest_id = serializers.UUIDField(
        read_only=True,
        allow_null=True,
        help_text="The digest it is a member of (status digested, or cancelled from it), or that it was sent for.",
    )
    route = RouteEntrySerializer(
        many=True,
        read_only=True,
        help_text="A fallback notification's channels in order with what became of each; empty for one channel. "
        "channel is then the one used or being tried.",
    )

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
            "category",
            "template",
            "locale",
            "html_message",
            "suppressed_reason",
            "scheduled_for",
            "route",
            "provider_status",
            "provider_status_at",
            "digest_id",
        ]


class NotificationDetailSerializer(NotificationSerializer):
    attempts = AttemptSerializer(many=True, read_only=True)

    class Meta(NotificationSerializer.Meta):
        fields = [*NotificationSerializer.Meta.fields, "attempts"]


class NotificationFilterSerializer(serializers.Serializer):  # type: ignore[type-arg]
    status = serializers.ChoiceField(choices=Status.choices, required=False)
    channel = serializers.ChoiceField(choices=Channel.choices, required=False)
    # Matched exactly, like the path's user_id. Trimmed, a value of only whitespace (even "\x1e", a
    # string the schema allows) became blank and was refused.
    user_id = serializers.CharField(required=False, max_length=255, trim_whitespace=False)
    created_after = serializers.DateTimeField(required=False, help_text="Inclusive.")
    created_before = serializers.DateTimeField(required=False, help_text="Exclusive.")
    broadcast = serializers.UUIDField(required=False, help_text="Only the notifications this broadcast made.")

    def to_internal_value(self, data: Any) -> Any:
        # DRF reads an empty query value of an optional field as "not given", so `?channel=` listed
        # every channel: a client that meant to filter got everything, silently.
        for name, _field in self.fields.items():
            if name in data and data.get(name) == "":
                raise serializers.ValidationError({name: ["may not be empty; leave the parameter out to not filter by it"]})
        return super().to_internal_value(data)


class QuietHoursSerializer(serializers.Serializer):  # type: ignore[type-arg]
    start = StrictCharField(max_length=5, help_text="HH:MM, 24-hour, e.g. 22:00")
    end = StrictCharField(max_length=5, help_text="HH:MM, 24-hour, e.g. 08:00")


class RecipientSerializer(serializers.ModelSerializer):  # type: ignore[type-arg]
    serializer_field_mapping = {
        **serializers.ModelSerializer.serializer_field_mapping,
        models.CharField: StrictCharField,
        models.EmailField: StrictEmailField,
        models.URLField: StrictURLField,
    }
    push_tokens = serializers.ListField(
        child=StrictCharField(max_length=MAX_PUSH_TOKEN_LENGTH),
        required=False,
        default=list,
        max_length=100,
        help_text=f"Up to 100 device tokens, each 1 to {MAX_PUSH_TOKEN_LENGTH} characters without spaces.",
    )
    quiet_hours = QuietHoursSerializer(
        required=False,
        allow_null=True,
        default=None,
        help_text="When nothing non-critical is sent, in the recipient's timezone (required with it); may cross midnight.",
    )

    class Meta:
        model = Recipient
        fields = [
            "user_id",
            *services.RECIPIENT_FIELDS,  # what recipient_upsert stores, in its order
            "created_at",
            "updated_at",
        ]
        read_only_fields = ["user_id", "created_at", "updated_at"]
        extra_kwargs: dict[str, Any] = {
            "email": {"required": False},
            "phone": {"required": False},
            "webhook_url": {"required": False, "help_text": "An http(s) URL."},
            "locale": {"required": False},
            "timezone": {"required": False, "help_text": "An IANA time zone name, e.g. Europe/Paris."},
        }

    def validate_timezone(self, value: str) -> str:
        import zoneinfo

        if value:
            try:
                zoneinfo.ZoneInfo(value)
            except (zoneinfo.ZoneInfoNotFoundError, ValueError):
                raise serializers.ValidationError(f"{value!r} is not an IANA time zone (e.g. Europe/Paris)") from None
        return value


# Plain strings, not enums: "status" is already the notification status enum's name in the schema.
class LivenessSerializer(serializers.Serializer):  # type: ignore[type-arg]
    status = serializers.CharField(help_text="ok")


class DependencyCheckSerializer(serializers.Serializer):  # type: ignore[type-arg]
    ok = serializers.BooleanField()
    detail = serializers.CharField(allow_blank=True)


class ReadinessSerializer(serializers.Serializer):  # type: ignore[type-arg]
    status = serializers.CharField(help_text="ok, or unavailable when a dependency is down.")
    down = serializers.ListField(child=serializers.CharField(), help_text="The dependencies that are down, by name.")
    checks = serializers.DictField(child=DependencyCheckSerializer(), help_text="database, broker and redis.")
