"""What a valid address looks like on each built-in channel; the registry names which is whose."""

from __future__ import annotations

import re
from urllib.parse import urlsplit

from django.core.exceptions import ValidationError
from django.core.validators import validate_email

from ..errors import ValidationFailed

E164 = re.compile(r"^\+[1-9][0-9]{6,14}$")  # ASCII digits only: \d also matches other scripts
# A stored token becomes Notification.address (varchar 2000); FCM and APNs tokens are far shorter.
MAX_PUSH_TOKEN_LENGTH = 2000


def email_address(address: str, field: str) -> str:
    try:
        validate_email(address)
    except ValidationError:
        raise ValidationFailed(f"{address!r} is not a valid email address", extra={"field": field}) from None
    return address


def phone_number(address: str, field: str) -> str:
    if not E164.match(address):
        raise ValidationFailed(f"{address!r} is not an E.164 phone number (e.g. +14155550123)", extra={"field": field})
    return address


def push_token(address: str, field: str) -> str:
    if not address or len(address) > MAX_PUSH_TOKEN_LENGTH or any(c.isspace() for c in address):
        raise ValidationFailed(
            f"a push device token is 1 to {MAX_PUSH_TOKEN_LENGTH} characters without spaces", extra={"field": field}
        )
    return address


def http_url(address: str, field: str) -> str:
    parts = urlsplit(address)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValidationFailed(f"{address!r} is not an http(s) URL", extra={"field": field})
    return address


# Recipient.user_id and Notification.user_id are varchar 255.
MAX_USER_ID_LENGTH = 255


def user_id(address: str, field: str) -> str:
    if not address or len(address) > MAX_USER_ID_LENGTH:
        raise ValidationFailed(f"a user_id is 1 to {MAX_USER_ID_LENGTH} characters", extra={"field": field})
    return address
