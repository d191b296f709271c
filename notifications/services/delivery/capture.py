"""Test mode's capture sink: in place of every channel's provider for a test token's notifications,
it records the rendered message (a CapturedMessage) and sends nothing.

Everything before and after the provider call runs as in live mode (validation, idempotency,
templates, preferences, quiet hours, caps, digests, routing, suppressions, retries, dead letters,
status webhooks); only the call itself is replaced. Reserved addresses force the outcomes an
integration must handle, each through the same path a real provider's answer takes:

- ``bounce@test.invalid``, ``complaint@test.invalid``: delivered, then reported bounced or
  complained as a provider's callback would be (the address goes on the test side's suppression
  list, a ``notification.bounced``/``.complained`` status event);
- ``fail@test.invalid``: every try fails as against a provider that is down, so the channel's retry
  policy spends its attempts and the notification ends ``dead`` with one dead letter;
- ``+15005550001``: refused for good, as Twilio refuses an invalid number (``failed``, one dead letter);
- push token ``test-unregistered``: refused as FCM refuses an ``UNREGISTERED`` token (``failed``,
  the token suppressed and dropped from the recipient's tokens).
"""

from __future__ import annotations

from typing import Any

from ...channels import OutgoingMessage, SendResult
from ...errors import PermanentChannelError, TransientChannelError
from ...models import ApiClient, CapturedMessage, ProviderStatus

PROVIDER = "the test mode's capture sink"
BOUNCE_ADDRESS = "bounce@test.invalid"
COMPLAINT_ADDRESS = "complaint@test.invalid"
FAIL_ADDRESS = "fail@test.invalid"
FAILING_PHONE = "+15005550001"
UNREGISTERED_PUSH_TOKEN = "test-unregistered"

# Delivered, then reported by "the provider" as this status.
_REPORTED: dict[str, str] = {BOUNCE_ADDRESS: ProviderStatus.BOUNCED, COMPLAINT_ADDRESS: ProviderStatus.COMPLAINED}


class CaptureSink:
    """A provider (channels/base.py) for one test-mode client: records instead of sending."""

    def __init__(self, *, client_id: Any) -> None:
        self.client_id = client_id

    def send(self, message: OutgoingMessage) -> SendResult:
        address = message.address.strip()
        if address.lower() == FAIL_ADDRESS:
            raise TransientChannelError(f"{PROVIDER}: {FAIL_ADDRESS} fails every try", code="test_failure")
        if message.channel == "sms" and address == FAILING_PHONE:
            raise PermanentChannelError(
                f"{PROVIDER}: {FAILING_PHONE} is refused as an invalid number",
                code="rejected",
                extra={"http_status": 400, "provider_code": "21211"},
            )
        if message.channel == "push" and address == UNREGISTERED_PUSH_TOKEN:
            raise PermanentChannelError(
                f"{PROVIDER}: the device token is UNREGISTERED",
                code="rejected",
                extra={"http_status": 404, "provider_code": "UNREGISTERED"},
            )
        captured = CapturedMessage.objects.create(
            client_id=self.client_id,
            notification_id=message.notification_id,
            channel=message.channel,
            to=address,
            subject=message.subject,
            body=message.body,
            html_body=message.html_body,
        )
        return SendResult(
            provider_message_id=f"test-{captured.pk}",
            response_summary="captured (test mode)",
            provider_status=_REPORTED.get(address.lower(), "") if message.channel == "email" else "",
        )


def captured_messages_clear(*, client: ApiClient) -> int:
    """Empty the test-mode client's captured messages; returns how many there were."""
    deleted, _ = CapturedMessage.objects.filter(client=client).delete()
    return int(deleted)
