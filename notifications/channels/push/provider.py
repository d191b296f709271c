"""The push channel: an FCM HTTP v1-compatible client (``projects/{id}/messages:send``)."""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import quote

from ...conf import get_config
from ..base import OutgoingMessage, SendResult
from ..http import ERROR_TEXT_LIMIT, json_object, provider_post, require_settings

PROVIDER = "FCM"


def describe_fcm_error(payload: Any, text: str) -> str:
    """FCM's error body is Google's ``{"error": {"code", "message", "status", "details": [...]}}``,
    with FCM's own ``errorCode`` (UNREGISTERED, INVALID_ARGUMENT, QUOTA_EXCEEDED...) in details."""
    error = payload.get("error") if isinstance(payload, dict) else None
    if not isinstance(error, dict):
        return text.strip()[:ERROR_TEXT_LIMIT] or "(empty body)"
    codes = [str(d["errorCode"]) for d in error.get("details", []) if isinstance(d, dict) and d.get("errorCode")]
    label = "/".join([str(error.get("status", "")), *codes]).strip("/")
    return f"{label}: {error.get('message', '')}" if label else str(error.get("message", ""))


def fcm_error_code(payload: Any) -> str:
    """FCM's own ``errorCode`` from an error body (UNREGISTERED: the token is gone); "" if none."""
    error = payload.get("error") if isinstance(payload, dict) else None
    details = error.get("details") if isinstance(error, dict) else None
    codes = [str(d["errorCode"]) for d in details or [] if isinstance(d, dict) and d.get("errorCode")]
    return codes[0] if codes else ""


def fcm_data(message: OutgoingMessage) -> dict[str, str]:
    """FCM's ``data`` map takes strings only: other metadata values travel as JSON. The
    notification id rides along so the app can drop a repeat (FCM has no idempotency key)."""
    data = {str(k): v if isinstance(v, str) else json.dumps(v, separators=(",", ":")) for k, v in message.metadata.items()}
    data["notification_id"] = message.notification_id
    return data


class FcmPushProvider:
    def account(self) -> str:
        return get_config().fcm_project_id

    def send(self, message: OutgoingMessage) -> SendResult:
        config = get_config()
        require_settings("push", {"FCM_PROJECT_ID": config.fcm_project_id, "FCM_ACCESS_TOKEN": config.fcm_access_token})
        body = {
            "message": {
                "token": message.address,
                "notification": {"title": message.subject, "body": message.body},
                "data": fcm_data(message),
            }
        }
        response = provider_post(
            f"{config.fcm_api_base}/v1/projects/{quote(config.fcm_project_id, safe='')}/messages:send",
            provider=PROVIDER,
            timeout=config.provider_timeout_seconds,
            describe=describe_fcm_error,
            error_code=fcm_error_code,  # an UNREGISTERED token goes on the suppression list
            json=body,
            headers={"Authorization": f"Bearer {config.fcm_access_token}"},
        )
        name = str(json_object(response.text).get("name", ""))
        return SendResult(provider_message_id=name, response_summary=f"HTTP {response.status_code} name={name or '?'}")
