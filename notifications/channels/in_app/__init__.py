"""The in-app channel: a delivered notification becomes an item of its recipient's inbox."""

from .provider import InAppProvider

__all__ = ["InAppProvider"]
