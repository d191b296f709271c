"""The in-app inbox's operations on items: marking one, bulk marks; the demo page's user and
sends; the origins a client's pages call from. A user's tokens are tokens.py."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any
from urllib.parse import urlsplit

from ...errors import ValidationFailed
from ...inbox.store import ACTIONS, inbox_items_change
from ...models import ApiClient, InboxItem
from ...selectors.inbox import inbox_item_get, inbox_items_of
from ..intake.accept import NotificationRequest, notification_accept
from ..intake.clients import api_client_get_or_create
from ..intake.idempotency import request_fingerprint
from .tokens import InboxUser, inbox_token_issue

BULK_ACTIONS = ("seen", "read", "archive")
# Ids one bulk request may name.
MAX_BULK_IDS = 1000


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
