"""One-click unsubscribe (RFC 8058): signed links naming who opts out of what, and the opt-out."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django.core import signing

from ...channels import CHANNEL_NAMES
from ...conf import get_config
from ...errors import ValidationFailed
from ...models import ApiClient
from .preferences import recipient_unsubscribe

# Signed with SECRET_KEY and this salt, so no other signature of the platform is a valid token.
# Unsigned text cannot be forged without the key; no timestamp, so a link in an old email keeps
# working, and the same notification always gets the same link (a replay renders identically).
SALT = "notifications.unsubscribe.v1"


@dataclass(frozen=True)
class UnsubscribeTarget:
    """Who opts out of what: the client's recipient ``user_id``, of ``category`` on ``channel``."""

    client_id: int
    user_id: str
    category: str
    channel: str


def unsubscribe_token(target: UnsubscribeTarget) -> str:
    payload = {"c": target.client_id, "u": target.user_id, "k": target.category, "ch": target.channel}
    return signing.Signer(salt=SALT).sign_object(payload)


def unsubscribe_url(target: UnsubscribeTarget) -> str:
    return f"{get_config().public_base_url}/u/{unsubscribe_token(target)}"


def list_unsubscribe_headers(url: str) -> dict[str, str]:
    """The RFC 8058 headers of an email whose recipient may opt out with one click."""
    return {"List-Unsubscribe": f"<{url}>", "List-Unsubscribe-Post": "List-Unsubscribe=One-Click"}


def unsubscribe_target(token: str) -> UnsubscribeTarget:
    """What a token names; ValidationFailed for one that is not ours, tampered with or malformed."""
    try:
        payload: Any = signing.Signer(salt=SALT).unsign_object(token)
    except (signing.BadSignature, ValueError, UnicodeError):
        raise ValidationFailed("this unsubscribe link is not valid", extra={"field": "token"}) from None
    if not (
        isinstance(payload, dict)
        and isinstance(payload.get("c"), int)
        and all(isinstance(payload.get(name), str) and payload.get(name) for name in ("u", "k", "ch"))
        and payload["ch"] in CHANNEL_NAMES
    ):
        raise ValidationFailed("this unsubscribe link is not valid", extra={"field": "token"})
    return UnsubscribeTarget(client_id=payload["c"], user_id=payload["u"], category=payload["k"], channel=payload["ch"])


def unsubscribe_one_click(*, token: str) -> UnsubscribeTarget:
    """Opt the recipient a token names out of its category on its channel; ValidationFailed for a
    token that is not valid (or whose client is gone)."""
    target = unsubscribe_target(token)
    client = ApiClient.objects.filter(pk=target.client_id).first()
    if client is None:
        raise ValidationFailed("this unsubscribe link is not valid", extra={"field": "token"})
    recipient_unsubscribe(client=client, user_id=target.user_id, category_key=target.category, channel=target.channel)
    return target
