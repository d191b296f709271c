"""The channel registry: each channel declared once, and everything else reads it.

A channel is its name, how its addresses are validated, which ``Recipient`` field holds a
recipient's address for it, the provider class it uses unless ``<NAME>_PROVIDER`` says otherwise,
the rate-limit bucket its sends share and, when its provider reports back, its callback routes.
A channel ``addressed_by_user_id`` (in_app) needs no stored address: the recipient's ``user_id``
is its address. A ``silent`` one makes no sound, so quiet hours do not hold it. The model's
choices, the API's and its routes, the settings parsers, accept, delivery and the recipient store
all read this table. To add a channel: a folder beside ``email/`` (its provider, and its callback
view and feedback parsing if it has any) and one entry here (then ``makemigrations`` for the new
choice).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..errors import ValidationFailed
from . import addresses


@dataclass(frozen=True)
class ChannelSpec:
    name: str
    # (address, field name for the error) -> the address normalised; raises ValidationFailed.
    validate: Callable[[str, str], str]
    # The Recipient field with the address; ``many``: a list of which the newest (last) is used.
    recipient_field: str
    default_provider: str
    many: bool = False
    rate_limit_key: str = ""
    # The dotted path of the channel's provider-callback routes (a module with ``urlpatterns``,
    # served under /api/v1/), when its provider reports delivery status back; "" for none.
    callbacks: str = ""
    addressed_by_user_id: bool = False
    silent: bool = False
    # Sent to each client's own endpoint, not a provider every client shares: taken in per-client
    # turns (WEBHOOK_CONCURRENCY_PER_CLIENT, concurrency.py) rather than rate limited, and no other
    # message's thread waits on its sends (services/delivery/send.py).
    client_endpoint: bool = False

    @property
    def rate_limit_bucket(self) -> str:
        return self.rate_limit_key or self.name


CHANNELS: dict[str, ChannelSpec] = {
    spec.name: spec
    for spec in (
        ChannelSpec(
            "email",
            addresses.email_address,
            "email",
            "notifications.channels.email.DjangoEmailProvider",
            callbacks="notifications.channels.email.callbacks",
        ),
        ChannelSpec(
            "sms",
            addresses.phone_number,
            "phone",
            "notifications.channels.sms.TwilioSmsProvider",
            callbacks="notifications.channels.sms.callbacks",
        ),
        ChannelSpec("push", addresses.push_token, "push_tokens", "notifications.channels.push.FcmPushProvider", many=True),
        ChannelSpec(
            "webhook", addresses.http_url, "webhook_url", "notifications.channels.webhook.WebhookProvider", client_endpoint=True
        ),
        ChannelSpec(
            "in_app",
            addresses.user_id,
            "user_id",
            "notifications.channels.in_app.InAppProvider",
            addressed_by_user_id=True,
            silent=True,
        ),
    )
}
CHANNEL_NAMES: tuple[str, ...] = tuple(CHANNELS)


def channel_spec(channel: str) -> ChannelSpec:
    try:
        return CHANNELS[channel]
    except KeyError:
        raise ValidationFailed(f"unknown channel {channel!r}", extra={"field": "channel"}) from None


def validate_address(channel: str, address: str, *, field: str = "to") -> str:
    """Return the address normalised for its channel, or raise ValidationFailed naming ``field``."""
    return channel_spec(channel).validate(address.strip(), field)


def recipient_address(recipient: Any, channel: str, *, user_id: str = "") -> str:
    """The stored address of ``recipient`` (None: none stored) for ``channel``; empty when none is
    known. A channel addressed by user id has its address whether or not a recipient is stored."""
    spec = CHANNELS.get(channel)
    if spec is None:
        return ""
    if spec.addressed_by_user_id:
        return user_id or (str(recipient.user_id) if recipient is not None else "")
    if recipient is None:
        return ""
    value = getattr(recipient, spec.recipient_field)
    if spec.many:
        return str(value[-1]) if value else ""
    return str(value or "")
