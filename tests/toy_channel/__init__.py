"""A toy channel, as a new channel's folder under notifications/channels/ would be: its provider
(tests/test_channels.py registers it with one registry entry)."""

from .provider import ToyProvider

__all__ = ["ToyProvider"]
