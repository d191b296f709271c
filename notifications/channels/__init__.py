"""Channels: the registry (``registry.py``, the index), the provider interface (``base.py``), the
provider lookup (``providers.py``) and one folder per channel (its provider, settings, feedback
parsing and callback view)."""

from __future__ import annotations

from .base import OutgoingMessage, Provider, SendResult
from .registry import CHANNEL_NAMES, CHANNELS, ChannelSpec, channel_spec, recipient_address, validate_address

__all__ = [
    "CHANNELS",
    "CHANNEL_NAMES",
    "ChannelSpec",
    "OutgoingMessage",
    "Provider",
    "SendResult",
    "channel_spec",
    "recipient_address",
    "validate_address",
]
