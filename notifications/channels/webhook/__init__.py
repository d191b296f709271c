"""The webhook channel: a signed POST to the recipient's URL, public addresses only."""

from .provider import WebhookProvider

__all__ = ["WebhookProvider"]
