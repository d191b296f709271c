"""The tiny interface every channel provider implements, and the data that crosses it."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

from ..errors import PermanentChannelError, TransientChannelError

__all__ = ["OutgoingMessage", "PermanentChannelError", "Provider", "SendResult", "TransientChannelError"]


@dataclass(frozen=True)
class OutgoingMessage:
    """Everything a provider needs to send one notification, and nothing about retries or queues."""

    notification_id: str
    channel: str
    address: str
    subject: str
    body: str
    metadata: dict[str, Any] = field(default_factory=dict)
    # The notification id: providers pass it on where their API deduplicates (a header, a request id).
    idempotency_key: str = ""
    client_name: str = ""
    webhook_secret: str = ""
    # The client's secrets before its rotations that still sign (their grace period), newest first.
    webhook_previous_secrets: tuple[str, ...] = ()
    # Email only: the HTML part (sent as multipart/alternative with ``body``) and extra headers
    # (List-Unsubscribe); other providers ignore them.
    html_body: str = ""
    headers: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class SendResult:
    provider_message_id: str = ""
    # A short, human-readable summary of the provider's answer, stored on the DeliveryAttempt.
    response_summary: str = ""
    # A provider status already known when the send returns (a ProviderStatus: the test mode's
    # capture sink reports its reserved bounce and complaint addresses so), recorded once the
    # delivery is, as a provider's callback would be.
    provider_status: str = ""


class Provider(Protocol):
    """Sends one message. Raises only TransientChannelError or PermanentChannelError.

    A provider may also have ``account() -> str``, the provider account it sends from, so that
    ``NOTIFICATIONS_RATE_LIMITS`` can limit that account on its own (``sms:ACxxx=5/s``).
    """

    def send(self, message: OutgoingMessage) -> SendResult: ...
