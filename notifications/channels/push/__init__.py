"""The push channel: FCM's HTTP v1 API."""

from .provider import FcmPushProvider

__all__ = ["FcmPushProvider"]
