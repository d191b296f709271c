"""Twilio's status callbacks: the X-Twilio-Signature checked, MessageStatus and ErrorCode read as a
ProviderReport (services/feedback/ records it)."""

from __future__ import annotations

import base64
import hashlib
import hmac
from collections.abc import Iterable, Mapping
from typing import Any
from urllib.parse import parse_qs, urlsplit, urlunsplit

from ...conf import get_config
from ...errors import ValidationFailed
from ...models import ProviderStatus, SuppressionReason
from ..feedback import CallbackRejected, ProviderReport, as_uuid
from .settings import auth_tokens

PROVIDER = "Twilio"
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
TWILIO_UNSUBSCRIBED = "21610"  # "Attempt to send to unsubscribed recipient" (the recipient replied STOP)


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


def twilio_status_report(*, request_url: str, path: str, params: Mapping[str, list[str]], signature: str) -> ProviderReport:
    """One Twilio status callback (``MessageSid``, ``MessageStatus``, ``ErrorCode``) as a report,
    once its ``X-Twilio-Signature`` verifies with an SMS account's auth token (the primary's or a
    backup's), for the URL Twilio was given (PUBLIC_BASE_URL + ``path``) or the one the request
    came to; CallbackRejected if it does not."""
    config = get_config()
    urls = {request_url} | ({config.provider_callback_base_url + path} if config.provider_callback_base_url else set())
    candidates = {variant for url in urls for variant in _port_variants(url)}
    tokens = auth_tokens()
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
    event = twilio_status or "callback"
    return ProviderReport(
        provider=PROVIDER,
        channel="sms",
        event=event,
        provider_message_id=message_sid,
        # The StatusCallback URL names the notification too (provider.py), covered by the signature.
        notification_id=as_uuid(_first(parse_qs(urlsplit(path).query), "notification")),
        status=status,
        suppress=suppress,
        ignored=not status and not suppress,
    )


def _first(params: Mapping[str, Any], name: str) -> str:
    values = params.get(name) or []
    return str(values[0]) if values else ""
