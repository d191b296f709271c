"""Delivery status from providers: Twilio's status callbacks and Mailgun's event webhooks, each
verified by the provider's own signature, recorded as the notification's ``provider_status``, and,
for a hard bounce, a spam complaint or an SMS STOP, as a suppression of the address.

Callbacks come late, twice and out of order. A provider status is only ever replaced by a later
one (``PROVIDER_STATUS_RANK``), with one conditional UPDATE, so two callbacks racing each other
cannot move it back either.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import logging
import time
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any
from urllib.parse import parse_qs, urlsplit, urlunsplit

from django.core.cache import cache
from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from ... import metrics
from ...conf import get_config
from ...degraded import REDIS_ERRORS
from ...errors import NotificationError, ValidationFailed
from ...models import PROVIDER_STATUS_RANK, Notification, ProviderStatus, StatusEventType, SuppressionReason
from ..policy.suppressions import suppression_add
from ..records.status_events import status_event_record

logger = logging.getLogger("notifications.services")

# Twilio's MessageStatus values (https://www.twilio.com/docs/messaging/api/message-resource#message-status-values)
# in ours; the rest (receiving, received, canceled...) say nothing about an outgoing send's fate.
TWILIO_STATUSES: dict[str, str] = {
    "accepted": ProviderStatus.SENT,
    "scheduled": ProviderStatus.SENT,
    "queued": ProviderStatus.SENT,
    "sending": ProviderStatus.SENT,
    "sent": ProviderStatus.SENT,
    "delivered": ProviderStatus.DELIVERED,
    "read": ProviderStatus.DELIVERED,
    "undelivered": ProviderStatus.UNDELIVERED,
    "failed": ProviderStatus.UNDELIVERED,
}
# The provider statuses a client's status webhook hears of (README, "Status webhooks").
STATUS_EVENT_TYPES: dict[str, str] = {
    ProviderStatus.BOUNCED: StatusEventType.BOUNCED,
    ProviderStatus.COMPLAINED: StatusEventType.COMPLAINED,
}
TWILIO_UNSUBSCRIBED = "21610"  # "Attempt to send to unsubscribed recipient" (the recipient replied STOP)

# Mailgun signs each event with a timestamp and a one-time token: older events and a token seen
# before are refused, so a captured request cannot be played again.
MAILGUN_MAX_AGE_SECONDS = 15 * 60
_MAILGUN_TOKEN_KEY = "mailgun-webhook-token:{}"


class CallbackRejected(NotificationError):
    """The request cannot be shown to come from the provider: a bad, stale or replayed signature."""

    code = "invalid_signature"


class CallbackUnavailable(NotificationError):
    """What proves a callback is fresh (Redis) cannot be reached; the provider retries later."""

    code = "unavailable"


@dataclass(frozen=True)
class FeedbackResult:
    # recorded | unchanged (a later status is already there) | ignored (an event we do not track,
    # a soft bounce) | unknown_message (no notification of ours has that message id)
    outcome: str
    notification_id: str = ""
    provider_status: str = ""
    suppressed: str = ""  # the suppression reason, when the address was put on the list just now


def notification_provider_status_record(*, notification_id: Any, status: str, at: datetime) -> bool:
    """Set the notification's provider status to ``status`` unless it already holds one as late or
    later, in one ``UPDATE ... WHERE provider_status IN (earlier ones)``; True if it changed."""
    earlier = [value for value, rank in PROVIDER_STATUS_RANK.items() if rank < PROVIDER_STATUS_RANK[status]]
    updated = Notification.objects.filter(pk=notification_id, provider_status__in=earlier).update(
        provider_status=status, provider_status_at=at, updated_at=timezone.now()
    )
    return updated == 1


def _feedback_record(
    notification: Notification | None, *, status: str, suppress: str = "", provider: str, event: str
) -> FeedbackResult:
    if notification is None:
        logger.info("%s %s for a message we do not know; ignored", provider, event)
        return FeedbackResult("unknown_message")
    now = timezone.now()
    with transaction.atomic():
        changed = notification_provider_status_record(notification_id=notification.pk, status=status, at=now) if status else False
        added = bool(suppress) and suppression_add(
            client_id=notification.client_id,
            channel=notification.channel,
            address=notification.address,
            reason=suppress,
            notification_id=notification.pk,
        )
        if changed and status in STATUS_EVENT_TYPES:
            status_event_record(notifications=[notification], event_type=STATUS_EVENT_TYPES[status], occurred_at=now)
    logger.info(
        "%s %s for notification %s: provider status %s%s",
        provider,
        event,
        notification.pk,
        status or "kept",
        "" if changed or not status else " (a later one was already recorded)",
        extra={"notification_id": str(notification.pk)},
    )
    return FeedbackResult(
        "recorded" if changed or added else ("ignored" if not status else "unchanged"),
        notification_id=str(notification.pk),
        provider_status=status,
        suppressed=suppress if added else "",
    )


def _feedback_ignored(*, provider: str, reason: str, notification: Notification, event: str) -> None:
    """Log (a warning: it may be a forged event) and count an event that named a notification but
    does not bind to it; the provider is answered 200 so it does not retry it."""
    metrics.record_provider_feedback_ignored(provider=provider.lower(), reason=reason)
    logger.warning(
        "%s %s ignored for notification %s: %s",
        provider,
        event,
        notification.pk,
        reason.replace("_", " "),
        extra={"notification_id": str(notification.pk), "provider": provider, "reason": reason, "event": event},
    )


def _notification_by(match: Q, *, channel: str, provider_message_id: str, provider: str, event: str) -> Notification | None:
    """The notification ``match`` finds on ``channel``. One found by its id (the callback outran
    the send's commit) whose stored message id is another message's (a resend) is not this one's."""
    found = (
        Notification.objects.filter(match, channel=channel)
        .only("id", "client_id", "channel", "address", "user_id", "status", "provider_message_id")
        .first()
    )
    if found is not None and found.provider_message_id not in ("", provider_message_id):
        _feedback_ignored(provider=provider, reason="message_id_mismatch", notification=found, event=event)
        return None
    return found


def _as_uuid(value: Any) -> uuid.UUID | None:
    try:
        return uuid.UUID(str(value))
    except ValueError:
        return None


# --- Twilio ------------------------------------------------------------------------------------


def twilio_signature(*, url: str, params: Mapping[str, Iterable[str]], auth_token: str) -> str:
    """Twilio's X-Twilio-Signature: base64 HMAC-SHA1, keyed with the auth token, of the full URL
    followed by each POST parameter's name and value, sorted by name (and a repeated name's values
    sorted), as twilio-python's RequestValidator computes it."""
    signed = url + "".join(name + value for name in sorted(params) for value in sorted(set(params[name])))
    digest = hmac.new(auth_token.encode(), signed.encode(), hashlib.sha1).digest()
    return base64.b64encode(digest).decode()


def _port_variants(url: str) -> set[str]:
    """``url`` as given, without its port and with the scheme's default port: Twilio signs the URL
    as it requested it, and a proxy may add or drop a default port on the way (twilio-python tries both)."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    if ":" in host:
        host = f"[{host}]"
    default_port = {"https": 443, "http": 80}.get(parts.scheme)
    variants = {url, urlunsplit(parts._replace(netloc=host))}
    if default_port:
        variants.add(urlunsplit(parts._replace(netloc=f"{host}:{parts.port or default_port}")))
    return variants


def twilio_status_record(*, request_url: str, path: str, params: Mapping[str, list[str]], signature: str) -> FeedbackResult:
    """Record one Twilio status callback (``MessageSid``, ``MessageStatus``, ``ErrorCode``) once its
    ``X-Twilio-Signature`` verifies with an SMS account's auth token (the primary's or a backup's),
    for the URL Twilio was given
    (PUBLIC_BASE_URL + ``path``) or the one the request came to; CallbackRejected if it does not."""
    config = get_config()
    urls = {request_url} | ({config.provider_callback_base_url + path} if config.provider_callback_base_url else set())
    candidates = {variant for url in urls for variant in _port_variants(url)}
    # Twilio signs with the auth token of the account that sent the message: the primary's, or a
    # backup's (SMS_FAILOVER_ACCOUNTS) for a message sent while the primary's circuit was open.
    backups = [str(account.settings.get("auth_token") or "") for account in config.failover_accounts.get("sms", ())]
    tokens = list(dict.fromkeys(token for token in (config.twilio_auth_token, *backups) if token))
    if not signature or not any(
        hmac.compare_digest(twilio_signature(url=url, params=params, auth_token=token).encode(), signature.encode())
        for url in candidates
        for token in tokens
    ):
        raise CallbackRejected(
            "the X-Twilio-Signature does not verify with TWILIO_AUTH_TOKEN (or an SMS_FAILOVER_ACCOUNTS auth_token) for this URL"
            if tokens
            else "TWILIO_AUTH_TOKEN is not set: no status callback can be verified"
        )
    message_sid = _first(params, "MessageSid") or _first(params, "SmsSid")
    twilio_status = (_first(params, "MessageStatus") or _first(params, "SmsStatus")).lower()
    if not message_sid:
        raise ValidationFailed("a status callback names its message in MessageSid", extra={"field": "MessageSid"})
    status = TWILIO_STATUSES.get(twilio_status, "")
    suppress = SuppressionReason.UNSUBSCRIBED_SMS if _first(params, "ErrorCode") == TWILIO_UNSUBSCRIBED else ""
    if not status and not suppress:
        return FeedbackResult("ignored")
    match = Q(provider_message_id=message_sid)
    # The StatusCallback URL names the notification too (channels/sms.py), covered by the signature.
    notification_id = _as_uuid(_first(parse_qs(urlsplit(path).query), "notification"))
    if notification_id is not None:
        match |= Q(pk=notification_id)
    event = twilio_status or "callback"
    notification = _notification_by(match, channel="sms", provider_message_id=message_sid, provider="Twilio", event=event)
    return _feedback_record(notification, status=status, suppress=suppress, provider="Twilio", event=event)


def _first(params: Mapping[str, Any], name: str) -> str:
    values = params.get(name) or []
    return str(values[0]) if values else ""


# --- Mailgun -----------------------------------------------------------------------------------


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


def mailgun_event_record(*, payload: Any, now: float | None = None) -> FeedbackResult:
    """Record one Mailgun event webhook (``{"signature": {...}, "event-data": {...}}``) once its
    signature verifies: ``delivered``; ``failed`` with severity ``permanent`` a hard bounce (the
    address is suppressed), ``temporary`` a soft bounce (logged, the status kept: Mailgun retries);
    ``complained`` a spam complaint (suppressed). Other events are acknowledged and ignored."""
    body = payload if isinstance(payload, dict) else {}
    token_key = _mailgun_verify(body.get("signature"), now=time.time() if now is None else now)
    try:
        return _mailgun_event_record(body)
    except Exception:
        _mailgun_token_forget(token_key)
        raise


def _mailgun_event_record(body: dict[str, Any]) -> FeedbackResult:
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
        return FeedbackResult("ignored")
    else:
        return FeedbackResult("ignored")
    message = event_data.get("message")
    headers = message.get("headers") if isinstance(message, dict) else None
    message_id = str(headers.get("message-id") or "").strip().strip("<>") if isinstance(headers, dict) else ""
    if not message_id:
        raise ValidationFailed(
            "a Mailgun event names its message in event-data.message.headers.message-id",
            extra={"field": "event-data.message.headers.message-id"},
        )
    # Our Message-ID is <notification id@domain> (channels/email.py), stored with its brackets;
    # its id part finds a notification whose send has not committed yet.
    stored_id = f"<{message_id}>"
    match = Q(provider_message_id=stored_id)
    notification_id = _as_uuid(message_id.partition("@")[0])
    if notification_id is not None:
        match |= Q(pk=notification_id)
    notification = _notification_by(match, channel="email", provider_message_id=stored_id, provider="Mailgun", event=event)
    # Mailgun's signature covers only its timestamp and token, not the event: an event counts only
    # for the address it names, so a signed event cannot bounce or suppress another address.
    if notification is not None and not _same_email_address(event_data.get("recipient"), notification.address):
        _feedback_ignored(provider="Mailgun", reason="recipient_mismatch", notification=notification, event=event)
        return FeedbackResult("ignored")
    return _feedback_record(notification, status=status, suppress=suppress, provider="Mailgun", event=event)


def _same_email_address(recipient: Any, address: str) -> bool:
    """Whether Mailgun's ``recipient`` is ``address``: addresses are stored as accepted (only
    validated), and providers may change their case, so they are compared case-insensitively."""
    return isinstance(recipient, str) and bool(recipient.strip()) and recipient.strip().lower() == address.strip().lower()
