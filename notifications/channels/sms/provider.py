"""The SMS channel: a Twilio-compatible REST client (Messages API, form-encoded POST)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any
from urllib.parse import quote

from ...conf import get_config
from ..base import OutgoingMessage, SendResult
from ..http import ERROR_TEXT_LIMIT, json_object, provider_post, require_settings
from .settings import TwilioAccount, backup_account, primary_account

PROVIDER = "Twilio"
# Where Twilio posts a message's status changes (callbacks.py), under PUBLIC_BASE_URL.
STATUS_CALLBACK_PATH = "/api/v1/providers/twilio/status"


def describe_twilio_error(payload: Any, text: str) -> str:
    """Twilio's error body is ``{"code": 21211, "message": "...", "more_info": "...", "status": 400}``."""
    if isinstance(payload, dict) and payload.get("message"):
        code = payload.get("code")
        return f"{payload['message']} (Twilio error {code})" if code else str(payload["message"])
    return text.strip()[:ERROR_TEXT_LIMIT] or "(empty body)"


def twilio_error_code(payload: Any) -> str:
    """Twilio's numeric error code (21610: the recipient replied STOP) as a string; "" if none."""
    return str(payload["code"]) if isinstance(payload, dict) and payload.get("code") else ""


def status_callback_url(notification_id: str) -> str:
    """The StatusCallback URL of one message, or "" when PUBLIC_BASE_URL is not set. It names the
    notification too, so a callback that outruns the send's own commit still finds its row."""
    base = get_config().provider_callback_base_url
    return f"{base}{STATUS_CALLBACK_PATH}?notification={quote(notification_id, safe='')}" if base else ""


class TwilioSmsProvider:
    def __init__(self, account: TwilioAccount | None = None) -> None:
        # A failover account (SMS_FAILOVER_ACCOUNTS); None: the primary, TWILIO_* as set at each send.
        self._account = account

    @classmethod
    def for_failover_account(cls, settings: Mapping[str, Any]) -> TwilioSmsProvider:
        return cls(backup_account(settings))

    def twilio_account(self) -> TwilioAccount:
        return self._account or primary_account()

    def account(self) -> str:
        return self.twilio_account().account_sid

    def send(self, message: OutgoingMessage) -> SendResult:
        account, config = self.twilio_account(), get_config()
        require_settings(
            "sms",
            {
                "TWILIO_ACCOUNT_SID": account.account_sid,
                "TWILIO_AUTH_TOKEN": account.auth_token,
                "TWILIO_FROM_NUMBER": account.from_number,
            },
        )
        sid = account.account_sid
        data = {"To": message.address, "From": account.from_number, "Body": message.body}
        callback = status_callback_url(message.notification_id)
        if callback:
            data["StatusCallback"] = callback
        response = provider_post(
            f"{account.api_base}/2010-04-01/Accounts/{quote(sid, safe='')}/Messages.json",
            provider=PROVIDER,
            timeout=config.provider_timeout_seconds,
            describe=describe_twilio_error,
            error_code=twilio_error_code,  # a STOP (21610) goes on the suppression list
            auth=(sid, account.auth_token),
            data=data,
            # Twilio drops a repeat of the same token, so a send retried after a lost answer is not doubled.
            headers={"I-Twilio-Idempotency-Token": message.idempotency_key or message.notification_id},
        )
        payload = json_object(response.text)
        message_sid = str(payload.get("sid", ""))
        return SendResult(
            provider_message_id=message_sid,
            response_summary=f"HTTP {response.status_code} sid={message_sid or '?'} status={payload.get('status', '?')}",
        )
