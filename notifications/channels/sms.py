"""The SMS channel: a Twilio-compatible REST client (Messages API, form-encoded POST)."""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

from ..conf import get_config
from .base import OutgoingMessage, SendResult
from .http import ERROR_TEXT_LIMIT, json_object, provider_post, require_settings

PROVIDER = "Twilio"


def describe_twilio_error(payload: Any, text: str) -> str:
    """Twilio's error body is ``{"code": 21211, "message": "...", "more_info": "...", "status": 400}``."""
    if isinstance(payload, dict) and payload.get("message"):
        code = payload.get("code")
        return f"{payload['message']} (Twilio error {code})" if code else str(payload["message"])
    return text.strip()[:ERROR_TEXT_LIMIT] or "(empty body)"


class TwilioSmsProvider:
    def account(self) -> str:
        return get_config().twilio_account_sid

    def send(self, message: OutgoingMessage) -> SendResult:
        config = get_config()
        require_settings(
            "sms",
            {
                "TWILIO_ACCOUNT_SID": config.twilio_account_sid,
                "TWILIO_AUTH_TOKEN": config.twilio_auth_token,
                "TWILIO_FROM_NUMBER": config.twilio_from_number,
            },
        )
        sid = config.twilio_account_sid
        response = provider_post(
            f"{config.twilio_api_base}/2010-04-01/Accounts/{quote(sid, safe='')}/Messages.json",
            provider=PROVIDER,
            timeout=config.provider_timeout_seconds,
            describe=describe_twilio_error,
            auth=(sid, config.twilio_auth_token),
            data={"To": message.address, "From": config.twilio_from_number, "Body": message.body},
            # Twilio drops a repeat of the same token, so a send retried after a lost answer is not doubled.
            headers={"I-Twilio-Idempotency-Token": message.idempotency_key or message.notification_id},
        )
        payload = json_object(response.text)
        message_sid = str(payload.get("sid", ""))
        return SendResult(
            provider_message_id=message_sid,
            response_summary=f"HTTP {response.status_code} sid={message_sid or '?'} status={payload.get('status', '?')}",
        )
