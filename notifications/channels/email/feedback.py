"""Mailgun's event webhooks: the signature checked (HMAC-SHA256 of timestamp and token, each token
once, within 15 minutes), the event read as a ProviderReport (services/feedback/ records it)."""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import logging
import time
from collections.abc import Iterator
from typing import Any

from django.core.cache import cache

from ...conf import get_config
from ...degraded import REDIS_ERRORS
from ...errors import ValidationFailed
from ...models import ProviderStatus, SuppressionReason
from ..feedback import CallbackRejected, CallbackUnavailable, ProviderReport, as_uuid

logger = logging.getLogger("notifications.channels")

PROVIDER = "Mailgun"
# Mailgun signs each event with a timestamp and a one-time token: older events and a token seen
# before are refused, so a captured request cannot be played again.
MAILGUN_MAX_AGE_SECONDS = 15 * 60
_MAILGUN_TOKEN_KEY = "mailgun-webhook-token:{}"


def mailgun_signature(*, timestamp: str, token: str, signing_key: str) -> str:
    """Mailgun's webhook signature: hex HMAC-SHA256 of timestamp + token, keyed with the webhook signing key."""
    return hmac.new(signing_key.encode(), (timestamp + token).encode(), hashlib.sha256).hexdigest()


def _mailgun_verify(signature: Any, *, now: float) -> str:
    """Raise CallbackRejected unless ``signature`` (the body's ``signature`` object) is Mailgun's,
    recent, and its token not seen before; the token is remembered for as long as it would pass.
    Returns the cache key that remembers it."""
    key = get_config().mailgun_webhook_signing_key
    if not key:
        raise CallbackRejected("MAILGUN_WEBHOOK_SIGNING_KEY is not set: no event can be verified")
    fields = signature if isinstance(signature, dict) else {}
    timestamp, token, given = (str(fields.get(name) or "") for name in ("timestamp", "token", "signature"))
    expected = mailgun_signature(timestamp=timestamp, token=token, signing_key=key)
    if not (timestamp and token and given) or not hmac.compare_digest(expected.encode(), given.encode()):
        raise CallbackRejected("the event's signature does not verify with MAILGUN_WEBHOOK_SIGNING_KEY")
    try:
        age = now - float(timestamp)
    except ValueError:
        raise CallbackRejected("the event's signature timestamp is not a number") from None
    if abs(age) > MAILGUN_MAX_AGE_SECONDS:
        raise CallbackRejected(f"the event was signed {age:.0f} s ago, past the {MAILGUN_MAX_AGE_SECONDS} s allowed")
    remember_for = max(1, int(MAILGUN_MAX_AGE_SECONDS - age) + 1)
    token_key = _MAILGUN_TOKEN_KEY.format(hashlib.sha256(token.encode()).hexdigest())
    try:
        first_use = cache.add(token_key, 1, timeout=remember_for)
    except REDIS_ERRORS as exc:
        # Refused rather than taken unchecked: Mailgun retries a failed webhook for hours.
        raise CallbackUnavailable(f"Redis cannot be reached to check the event's token: {type(exc).__name__}") from exc
    if not first_use:
        raise CallbackRejected("the event's token was used before (a replay)")
    return token_key


def _mailgun_token_forget(token_key: str) -> None:
    """Forget a verified event's token once recording it failed: Mailgun retries the event with
    the same token, and that retry is the event's only way in, not a replay."""
    try:
        cache.delete(token_key)
    except REDIS_ERRORS:
        # The retry will be refused as a replay; the recording's own error is the one to report.
        logger.warning("could not forget a Mailgun event's token after its recording failed; its retry will be refused")


@contextlib.contextmanager
def mailgun_event_verified(signature: Any, *, now: float | None = None) -> Iterator[None]:
    """Verify an event's ``signature`` (CallbackRejected, CallbackUnavailable), then run the body;
    if recording the event fails, its token is forgotten, so Mailgun's retry of it is let in."""
    token_key = _mailgun_verify(signature, now=time.time() if now is None else now)
    try:
        yield
    except Exception:
        _mailgun_token_forget(token_key)
        raise


def mailgun_event_report(body: dict[str, Any]) -> ProviderReport:
    """One Mailgun event (``{"signature": {...}, "event-data": {...}}``) as a report:
    ``delivered``; ``failed`` with severity ``permanent`` a hard bounce (the address is
    suppressed), ``temporary`` a soft bounce (logged, the status kept: Mailgun retries);
    ``complained`` a spam complaint (suppressed). Other events are ignored."""
    event_data = body.get("event-data")
    if not isinstance(event_data, dict):
        raise ValidationFailed("a Mailgun event carries its event in event-data", extra={"field": "event-data"})
    event, severity = str(event_data.get("event", "")), str(event_data.get("severity", ""))
    status, suppress = "", ""
    if event == "delivered":
        status = ProviderStatus.DELIVERED
    elif event == "failed" and severity == "permanent":
        # "old": Mailgun gave up after hours of temporary failures; the address itself may be fine.
        if event_data.get("reason") == "old":
            status = ProviderStatus.UNDELIVERED
        else:
            status, suppress = ProviderStatus.BOUNCED, SuppressionReason.BOUNCED
    elif event == "complained":
        status, suppress = ProviderStatus.COMPLAINED, SuppressionReason.COMPLAINED
    elif event == "failed":
        logger.info("Mailgun soft bounce (%s); its retries go on", str(event_data.get("reason", "?"))[:64])
        return ProviderReport(provider=PROVIDER, channel="email", event=event, ignored=True)
    else:
        return ProviderReport(provider=PROVIDER, channel="email", event=event, ignored=True)
    message = event_data.get("message")
    headers = message.get("headers") if isinstance(message, dict) else None
    message_id = str(headers.get("message-id") or "").strip().strip("<>") if isinstance(headers, dict) else ""
    if not message_id:
        raise ValidationFailed(
            "a Mailgun event names its message in event-data.message.headers.message-id",
            extra={"field": "event-data.message.headers.message-id"},
        )
    # Our Message-ID is <notification id@domain> (provider.py), stored with its brackets; its id
    # part finds a notification whose send has not committed yet. Mailgun's signature covers only
    # its timestamp and token, not the event: an event counts only for the address it names, so a
    # signed event cannot bounce or suppress another address.
    return ProviderReport(
        provider=PROVIDER,
        channel="email",
        event=event,
        provider_message_id=f"<{message_id}>",
        notification_id=as_uuid(message_id.partition("@")[0]),
        status=status,
        suppress=suppress,
        recipient=str(event_data.get("recipient") or "") if isinstance(event_data.get("recipient"), str) else "",
    )
