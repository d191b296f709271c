"""The SMS channel: a Twilio-compatible REST client, with failover accounts."""

from .provider import TwilioSmsProvider

__all__ = ["TwilioSmsProvider"]
