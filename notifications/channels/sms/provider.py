"""The SMS channel: a Twilio-compatible REST client (Messages API, form-encoded POST)."""

from __future__ import annotations

import dataclasses
from typing import Any
from urllib.parse import quote

from ...conf import NotificationsConfig, get_config
from ..base import OutgoingMessage, SendResult
from ..http import ERROR_TEXT_LIMIT, json_object, provider_post, require_settings

PROVIDER = "Twilio"
# Where Twilio posts a message's status changes (api/provider_callbacks.py), under PUBLIC_BASE_URL.
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
    def __init__(self, **account_settings: Any) -> None:
        # A failover account (SMS_FAILOVER_ACCOUNTS): its twilio_* settings instead of TWILIO_*.
        self.account_settings = account_settings

    def _config(self) -> NotificationsConfig:
        config = get_config()
        return dataclasses.replace(config, **self.account_settings) if self.account_settings else config

    def account(self) -> str:
        return self._config().twilio_account_sid

    def send(self, message: OutgoingMessage) -> SendResult:
        config = self._config()
        require_settings(
            "sms",
            {
                "TWILIO_ACCOUNT_SID": config.twilio_account_sid,
                "TWILIO_AUTH_TOKEN": config.twilio_auth_token,
                "TWILIO_FROM_NUMBER": config.twilio_from_number,
            },
        )
        sid = config.twilio_account_sid
        data = {"To": message.address, "From": config.twilio_from_number, "Body": message.body}
        callback = status_callback_url(message.notification_id)
        if callback:
            data["StatusCallback"] = callback
        response = provider_post(
            f"{config.twilio_api_base}/2010-04-01/Accounts/{quote(sid, safe='')}/Messages.json",
            provider=PROVIDER,
            timeout=config.provider_timeout_seconds,
            describe=describe_twilio_error,
            error_code=twilio_error_code,  # a STOP (21610) goes on the suppression list
            auth=(sid, config.twilio_auth_token),
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
