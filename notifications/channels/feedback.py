"""What a provider's report says, once its channel verified and parsed it: the common shape a
channel's feedback module (channels/<name>/feedback.py) hands to services/feedback/, and the two
ways a report is refused."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any

from ..errors import NotificationError


class CallbackRejected(NotificationError):
    """The request cannot be shown to come from the provider: a bad, stale or replayed signature."""

    code = "invalid_signature"


class CallbackUnavailable(NotificationError):
    """What proves a callback is fresh (Redis) cannot be reached; the provider retries later."""

    code = "unavailable"


@dataclass(frozen=True)
class ProviderReport:
    """One verified provider event about one sent message. ``status`` a ProviderStatus ("" keeps
    the notification's), ``suppress`` a SuppressionReason for its address ("" none). The message
    is found by ``provider_message_id`` on ``channel``, or by ``notification_id`` when the provider
    echoes ours (a callback can outrun the send's own commit); ``recipient``, when the event names
    one, must be the notification's address or the event counts for nothing."""

    provider: str
    channel: str
    event: str
    provider_message_id: str = ""
    notification_id: uuid.UUID | None = None
    status: str = ""
    suppress: str = ""
    recipient: str | None = None
    # An event we do not track (a soft bounce, a status that says nothing of the send's fate).
    ignored: bool = False


def as_uuid(value: Any) -> uuid.UUID | None:
    try:
        return uuid.UUID(str(value))
    except ValueError:
        return None
