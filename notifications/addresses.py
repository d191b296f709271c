"""What a valid address looks like on each channel, and where a recipient's address is found."""

from __future__ import annotations

import re
from urllib.parse import urlsplit

from django.core.exceptions import ValidationError
from django.core.validators import validate_email

from .errors import ValidationFailed
from .models import Recipient

E164 = re.compile(r"^\+[1-9]\d{6,14}$")
# A stored token becomes Notification.address (varchar 2000); FCM and APNs tokens are far shorter.
MAX_PUSH_TOKEN_LENGTH = 2000


def validate_address(channel: str, address: str, *, field: str = "to") -> str:
    """Return the address normalised for its channel, or raise ValidationFailed naming ``field``."""
    address = address.strip()
    if channel == "email":
        try:
            validate_email(address)
        except ValidationError:
            raise ValidationFailed(f"{address!r} is not a valid email address", extra={"field": field}) from None
        return address
    if channel == "sms":
        if not E164.match(address):
            raise ValidationFailed(f"{address!r} is not an E.164 phone number (e.g. +14155550123)", extra={"field": field})
        return address
    if channel == "push":
        if not address or len(address) > MAX_PUSH_TOKEN_LENGTH or any(c.isspace() for c in address):
            raise ValidationFailed(
                f"a push device token is 1 to {MAX_PUSH_TOKEN_LENGTH} characters without spaces", extra={"field": field}
            )
        return address
    if channel == "webhook":
        parts = urlsplit(address)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValidationFailed(f"{address!r} is not an http(s) URL", extra={"field": field})
        return address
    raise ValidationFailed(f"unknown channel {channel!r}", extra={"field": "channel"})


def recipient_address(recipient: Recipient, channel: str) -> str:
    """The stored address of ``recipient`` for ``channel``; empty when none is known."""
    if channel == "email":
        return recipient.email
    if channel == "sms":
        return recipient.phone
    if channel == "push":
        # The most recently registered device is last.
        return recipient.push_tokens[-1] if recipient.push_tokens else ""
    if channel == "webhook":
        return recipient.webhook_url
    return ""
