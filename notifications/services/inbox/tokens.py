"""Inbox user tokens (issue, revoke, verify), the one-use stream tickets made with them, and the
check an open stream makes of its token.

A user token is Django's signing of (client, user_id, issued-at in ms, expiry), salted for this
use: it can be checked without a lookup, and it cannot be made without SECRET_KEY. What a lookup
adds is revocation: DELETE /inbox/tokens stores, per user, the moment before which their tokens
are refused, and rotating or revoking the client refuses every token it made before (its
``token_rotated_at``, its ``is_active``). Every request reads that one indexed row with the
client's (one query), so a revocation holds from the next request on, in every process, with no
cache to go stale; open streams are told through the inbox's wake-ups (inbox/live.py).

A stream ticket carries a token's user, issue and expiry for TICKET_SECONDS, and is taken once
(an atomic add in the shared cache): the URL of GET /inbox/stream?ticket= is worth nothing once
the stream has opened, so a proxy's log or a trace that records it leaks nothing of use.
"""

from __future__ import annotations

import logging
import secrets
import time
from dataclasses import dataclass
from datetime import UTC, datetime

from django.core import signing
from django.core.cache import cache
from django.db import transaction
from django.db.models import OuterRef, Subquery
from django.utils import timezone

from ...degraded import REDIS_ERRORS
from ...errors import TokenRefused, ValidationFailed
from ...inbox.live import epoch_ms, wake
from ...models import ApiClient, InboxTokenGate

logger = logging.getLogger("notifications.inbox")

TOKEN_SALT = "notifications.inbox.user-token"
TICKET_SALT = "notifications.inbox.stream-ticket"
MAX_TOKEN_TTL_SECONDS = 86_400
# How long a stream ticket may wait to be used: the widget uses it at once.
TICKET_SECONDS = 60


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

    @property
    def issued_ms(self) -> int:
        return epoch_ms(self.issued_at)


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
        # Open streams check their token when woken: they end now rather than at their token's expiry.
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
    return _user(client_pk, user_id, issued_ms, expires_ms)


def inbox_stream_ticket_issue(*, user: InboxUser) -> tuple[str, datetime]:
    """A one-use ticket that opens one stream for ``user`` within TICKET_SECONDS (never past the
    token's own expiry); with when it expires. The stream it opens ends as the token would."""
    expires_ms = min(int((time.time() + TICKET_SECONDS) * 1000), epoch_ms(user.expires_at))
    payload = {"c": user.client.pk, "u": user.user_id, "i": epoch_ms(user.issued_at), "e": epoch_ms(user.expires_at)}
    ticket = signing.dumps({**payload, "n": secrets.token_urlsafe(16)}, salt=TICKET_SALT, compress=True)
    return ticket, _moment(expires_ms)


def inbox_stream_ticket_redeem(ticket: str) -> InboxUser:
    """The user a ticket opens a stream for, once; TokenRefused for a ticket used, expired or
    revoked (with its token) since."""
    try:
        payload = signing.loads(ticket, salt=TICKET_SALT, max_age=TICKET_SECONDS)
        client_pk, user_id, issued_ms, expires_ms = payload["c"], str(payload["u"]), int(payload["i"]), int(payload["e"])
        nonce = str(payload["n"])
    except signing.SignatureExpired:
        raise TokenRefused("the stream ticket has expired", extra={"reason": "expired"}) from None
    except (signing.BadSignature, KeyError, TypeError, ValueError):
        raise TokenRefused(
            "not a stream ticket (POST /api/v1/inbox/stream/tickets makes one)", extra={"reason": "invalid"}
        ) from None
    try:
        first_use = cache.add(f"inbox:ticket:{nonce}", 1, timeout=TICKET_SECONDS + 5)
    except REDIS_ERRORS as exc:
        # Redis is down: the ticket still expires within a minute and dies with its token.
        logger.warning("a stream ticket's one use not checked (%s)", exc.__class__.__name__)
        first_use = True
    if not first_use:
        raise TokenRefused("the stream ticket was used already", extra={"reason": "used"})
    return _user(client_pk, user_id, issued_ms, expires_ms)


def inbox_user_holds(*, user: InboxUser) -> bool:
    """Whether ``user``'s token still holds: not expired, its client active and not rotated since
    it was issued, the user's tokens not revoked since (one query)."""
    try:
        _user(user.client.pk, user.user_id, epoch_ms(user.issued_at), epoch_ms(user.expires_at))
    except TokenRefused:
        return False
    return True


def _user(client_pk: int, user_id: str, issued_ms: int, expires_ms: int) -> InboxUser:
    if expires_ms <= time.time() * 1000:
        raise TokenRefused("the inbox token has expired", extra={"reason": "expired"})
    gate = InboxTokenGate.objects.filter(client=OuterRef("pk"), user_id=user_id).values("not_before")[:1]
    client = ApiClient.objects.filter(pk=client_pk, is_active=True).annotate(not_before=Subquery(gate)).first()
    if client is None:
        raise TokenRefused("the token's API client is no longer active", extra={"reason": "revoked"})
    not_before = client.not_before  # type: ignore[attr-defined]
    if not_before is not None and issued_ms < epoch_ms(not_before):
        raise TokenRefused("the inbox token was revoked", extra={"reason": "revoked"})
    # A token made before its client's token was rotated: made with a client token that may have leaked.
    if client.token_rotated_at is not None and issued_ms < epoch_ms(client.token_rotated_at):
        raise TokenRefused("the inbox token's API client was rotated since it was made", extra={"reason": "revoked"})
    return InboxUser(client=client, user_id=user_id, expires_at=_moment(expires_ms), issued_at=_moment(issued_ms))


def _moment(epoch_ms: int) -> datetime:
    return datetime.fromtimestamp(epoch_ms / 1000, tz=UTC)
