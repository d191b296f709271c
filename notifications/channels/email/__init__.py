"""The email channel: Django's mail backends (SMTP relays, failover accounts)."""

from .provider import DjangoEmailProvider

__all__ = ["DjangoEmailProvider"]
