"""The toy channel's provider: keeps what it was given to send, as a real one hands it to its API."""

from __future__ import annotations

import uuid

from notifications.channels import OutgoingMessage, SendResult


class ToyProvider:
    sent: list[OutgoingMessage] = []  # noqa: RUF012  (shared: the registry builds the provider itself)

    def send(self, message: OutgoingMessage) -> SendResult:
        ToyProvider.sent.append(message)
        return SendResult(provider_message_id=f"toy-{uuid.uuid4().hex[:12]}", response_summary="kept by the toy")
