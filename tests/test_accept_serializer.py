"""The accept's serializer answers exactly as DRF's own would: it reuses its bound fields per
thread and gives a left-out optional field its default itself (api/fields.ReusedFields), so the
same declarations run through plain DRF are the reference for every body here."""

from __future__ import annotations

from typing import Any

import pytest
from rest_framework import serializers

from notifications.api.fields import RefusesUnknownFields
from notifications.api.serializers import NotificationCreateSerializer


class PlainDRF(NotificationCreateSerializer):
    """The same fields and checks through DRF's own field binding and validation loop."""

    fields = serializers.Serializer.fields  # type: ignore[assignment]
    _writable_fields = serializers.Serializer._writable_fields
    _read_only_defaults = serializers.Serializer._read_only_defaults

    def to_internal_value(self, data: Any) -> Any:
        return RefusesUnknownFields.to_internal_value(self, data)


BASE = {"user_id": "u1", "message": "Your order shipped", "to": "ann@example.com"}
BODIES: dict[str, Any] = {
    "the fewest fields": BASE,
    "every optional field": {
        **BASE,
        "channel": "email",
        "subject": "Shipped",
        "metadata": {"order": 42, "tags": ["a", "ü"]},
        "priority": "bulk",
        "send_at": "2030-01-01T10:00:00Z",
        "idempotency_key": "k-1",
        "category": "orders",
        "locale": "fr-CA",
    },
    "a template with data": {"user_id": "u1", "template": "shipped", "data": {"n": 1}, "to": "ann@example.com"},
    "a route of channels": {"user_id": "u1", "message": "hi", "channels": ["push", "email"]},
    "a digest": {"user_id": "u1", "template": "t", "digest": {"key": "comments", "window_seconds": 60}},
    "user_id padded with spaces": {**BASE, "user_id": "  u1  "},
    "subject blank": {**BASE, "subject": ""},
    "an explicit null send_at": {**BASE, "send_at": None},
    "no user_id": {"message": "hi", "to": "ann@example.com"},
    "user_id blank": {**BASE, "user_id": "   "},
    "a number for the message": {**BASE, "message": 5},
    "an unknown field": {**BASE, "sned_at": "2030-01-01T10:00:00Z"},
    "an unknown channel": {**BASE, "channel": "fax"},
    "both message and template": {**BASE, "template": "t"},
    "neither message nor template": {"user_id": "u1", "to": "ann@example.com"},
    "data without a template": {**BASE, "data": {"n": 1}},
    "a subject over two lines": {**BASE, "subject": "a\nb"},
    "channel and channels": {**BASE, "channel": "sms", "channels": ["sms"]},
    "a channel twice": {"user_id": "u1", "message": "hi", "channels": ["sms", "sms"]},
    "metadata not an object": {**BASE, "metadata": [1]},
    "a lone surrogate": {**BASE, "message": "hi \ud800"},
    "a NUL": {**BASE, "subject": "a\x00b"},
    "a user_id over 255": {**BASE, "user_id": "u" * 256},
    "a bad locale": {**BASE, "locale": "not a locale!"},
    "a digest without its key": {"user_id": "u1", "template": "t", "digest": {"window_seconds": 60}},
    "several errors at once": {"user_id": "", "message": 1, "channel": "fax", "priority": "urgent"},
    "a list, not an object": [BASE],
}


def answer(serializer_class: type[serializers.Serializer], body: Any) -> tuple[bool, Any]:  # type: ignore[type-arg]
    serializer = serializer_class(data=body)
    if serializer.is_valid():
        return True, dict(serializer.validated_data)
    return False, serializer.errors


@pytest.mark.parametrize("case", list(BODIES))
def test_the_accept_serializer_answers_every_body_as_plain_drf_does(case: str) -> None:
    ours, drf = answer(NotificationCreateSerializer, BODIES[case]), answer(PlainDRF, BODIES[case])
    assert ours == drf
    # Each validation gets its own default objects, as DRF's do: a left-out metadata is a new dict.
    if ours[0] and "metadata" not in BODIES[case]:
        again = answer(NotificationCreateSerializer, BODIES[case])
        assert again == ours and again[1]["metadata"] is not ours[1]["metadata"]
