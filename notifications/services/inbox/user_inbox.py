"""The in-app inbox's operations: a user's tokens (issue, revoke, verify), marking items, bulk marks.

A user token is Django's signing of (client, user_id, issued-at in ms, expiry), salted for this
use: it can be checked without a lookup, and it cannot be made without SECRET_KEY. What a lookup
adds is revocation: DELETE /inbox/tokens stores, per user, the moment before which their tokens
are refused, and every request reads that one indexed row with the client's (one query), so a
revocation holds from the next request on, in every process, with no cache to go stale.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any
from urllib.parse import urlsplit

from django.core import signing
from django.db import transaction
from django.db.models import OuterRef, Subquery
from django.utils import timezone

from ...errors import TokenRefused, ValidationFailed
from ...inbox.live import wake
from ...inbox.store import ACTIONS, inbox_items_change
from ...models import ApiClient, InboxItem, InboxTokenGate
from ...selectors.inbox import inbox_item_get, inbox_items_of
from ..intake.accept import NotificationRequest, notification_accept
from ..intake.clients import api_client_get_or_create
from ..intake.idempotency import request_fingerprint

TOKEN_SALT = "notifications.inbox.user-token"
MAX_TOKEN_TTL_SECONDS = 86_400
BULK_ACTIONS = ("seen", "read", "archive")
# Ids one bulk request may name.
MAX_BULK_IDS = 1000


@dataclass(frozen=True)
class InboxUser:
    """Who an inbox request acts for: a user of a client, by a token that expires at ``expires_at``."""

    client: ApiClient
    user_id: str
    expires_at: datetime
    issued_at: datetime

    # DRF treats the authenticated principal as request.user.
    is_authenticated = True
    is_anonymous = False


def inbox_token_issue(*, client: ApiClient, user_id: str, ttl_seconds: int) -> tuple[str, datetime]:
    """A token for ``user_id`` of ``client``, good for ``ttl_seconds`` (1 to 86,400); with its expiry."""
    if not 1 <= ttl_seconds <= MAX_TOKEN_TTL_SECONDS:
        raise ValidationFailed(f"ttl_seconds is 1 to {MAX_TOKEN_TTL_SECONDS}", extra={"field": "ttl_seconds"})
    issued_ms = int(time.time() * 1000)
    expires_ms = issued_ms + ttl_seconds * 1000
    token = signing.dumps({"c": client.pk, "u": user_id, "i": issued_ms, "e": expires_ms}, salt=TOKEN_SALT, compress=True)
    return token, _moment(expires_ms)


def inbox_tokens_revoke(*, client: ApiClient, user_id: str) -> datetime:
    """Refuse every token of the user issued before now; those issued after are good."""
    now = timezone.now()
    with transaction.atomic():
        InboxTokenGate.objects.update_or_create(client=client, user_id=user_id, defaults={"not_before": now})
        # Open streams read the gate when woken: they end now rather than at their token's expiry.
        transaction.on_commit(lambda: wake(client_id=client.pk, user_id=user_id, revoked=True))
    return now


def inbox_token_verify(token: str) -> InboxUser:
    """The user a token acts for; TokenRefused (reason invalid, expired or revoked) otherwise."""
    try:
        # The signer's own age check bounds even a token whose payload could lie (it cannot: signed).
        payload = signing.loads(token, salt=TOKEN_SALT, max_age=MAX_TOKEN_TTL_SECONDS + 60)
        client_pk, user_id, issued_ms, expires_ms = payload["c"], str(payload["u"]), int(payload["i"]), int(payload["e"])
    except signing.SignatureExpired:
        raise TokenRefused("the inbox token has expired", extra={"reason": "expired"}) from None
    except (signing.BadSignature, KeyError, TypeError, ValueError):
        raise TokenRefused("not an inbox user token (POST /api/v1/inbox/tokens makes one)", extra={"reason": "invalid"}) from None
    if expires_ms <= time.time() * 1000:
        raise TokenRefused("the inbox token has expired", extra={"reason": "expired"})
    gate = InboxTokenGate.objects.filter(client=OuterRef("pk"), user_id=user_id).values("not_before")[:1]
    client = ApiClient.objects.filter(pk=client_pk, is_active=True).annotate(not_before=Subquery(gate)).first()
    if client is None:
        raise TokenRefused("the token's API client is no longer active", extra={"reason": "revoked"})
    not_before = client.not_before  # type: ignore[attr-defined]
    if not_before is not None and _moment(issued_ms) < not_before:
        raise TokenRefused("the inbox token was revoked", extra={"reason": "revoked"})
    return InboxUser(client=client, user_id=user_id, expires_at=_moment(expires_ms), issued_at=_moment(issued_ms))


def _moment(epoch_ms: int) -> datetime:
    return datetime.fromtimestamp(epoch_ms / 1000, tz=UTC)


def inbox_item_mark(*, user: InboxUser, item_id: str, action: str) -> InboxItem:
    """Apply ``action`` (seen, read, unread, archive, unarchive) to one of the user's items;
    NotFound for an item that is not theirs."""
    if action not in ACTIONS:
        raise ValidationFailed(f"action is one of {', '.join(ACTIONS)}", extra={"field": "action"})
    item = inbox_item_get(client_id=user.client.pk, user_id=user.user_id, item_id=item_id)
    inbox_items_change(client_id=user.client.pk, user_id=user.user_id, items=InboxItem.objects.filter(pk=item.pk), action=action)
    item.refresh_from_db()
    return item


def inbox_items_bulk_mark(
    *, user: InboxUser, action: str, ids: list[str] | None = None, before: datetime | None = None, category: str = ""
) -> int:
    """Apply ``action`` (seen, read, archive) to the user's items that match every filter given
    (ids, created before ``before``, of ``category``), or to all of them; the number changed."""
    if action not in BULK_ACTIONS:
        raise ValidationFailed(f"action is one of {', '.join(BULK_ACTIONS)}", extra={"field": "action"})
    items = inbox_items_of(client_id=user.client.pk, user_id=user.user_id)
    if ids is not None:
        items = items.filter(pk__in=ids)
    if before is not None:
        items = items.filter(created_at__lt=before)
    if category:
        items = items.filter(category=category)
    return len(inbox_items_change(client_id=user.client.pk, user_id=user.user_id, items=items, action=action))


DEMO_CLIENT = "demo"
DEMO_USERS = ("ann", "bob", "cho")


def inbox_demo_token(*, user_id: str) -> tuple[str, datetime]:
    """An hour's token for a user of the demo client (the one `make run` prints), for /inbox/demo/."""
    if user_id not in DEMO_USERS:
        raise ValidationFailed(f"the demo users are {', '.join(DEMO_USERS)}", extra={"field": "user"})
    client = api_client_get_or_create(name=DEMO_CLIENT)
    return inbox_token_issue(client=client, user_id=user_id, ttl_seconds=int(timedelta(hours=1).total_seconds()))


def inbox_demo_send(*, user_id: str, subject: str) -> str:
    """Accept an in-app notification to a demo user, as POST /notifications would; its id."""
    if user_id not in DEMO_USERS:
        raise ValidationFailed(f"the demo users are {', '.join(DEMO_USERS)}", extra={"field": "user"})
    payload: dict[str, Any] = {
        "user_id": user_id,
        "channel": "in_app",
        "subject": subject[:200] or "Hello",
        "message": "Sent from the demo page",
    }
    request = NotificationRequest(**payload, metadata={"source": "inbox-demo"})
    result = notification_accept(
        client=api_client_get_or_create(name=DEMO_CLIENT),
        request=request,
        idempotency_key=None,
        fingerprint=request_fingerprint(payload),
    )
    return result.notification_id


def inbox_allowed_origins_set(*, client: ApiClient, origins: list[str]) -> ApiClient:
    """Store the origins whose pages may call the inbox API for ``client`` (CORS), each checked."""
    client.inbox_allowed_origins = [origin_normalize(origin) for origin in origins]
    client.save(update_fields=["inbox_allowed_origins"])
    return client


def origin_normalize(origin: Any) -> str:
    """``scheme://host[:port]`` as a browser sends it in Origin, or ValidationFailed."""
    text = str(origin).strip().rstrip("/")
    parts = urlsplit(text)
    if parts.scheme not in ("http", "https") or not parts.hostname or parts.path or parts.query or len(text) > 255:
        raise ValidationFailed(
            f"{origin!r} is not an origin (scheme://host[:port], e.g. https://app.example.com)",
            extra={"field": "inbox_allowed_origins"},
        )
    return text.lower()
