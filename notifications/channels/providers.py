"""Channel providers, looked up by channel name: the registry's default class, or the dotted path
``<NAME>_PROVIDER`` gives in settings."""

from __future__ import annotations

import functools

from django.core.signals import setting_changed
from django.utils.module_loading import import_string

from ..conf import get_config
from .base import Provider


@functools.cache
def get_provider(channel: str) -> Provider:
    path = get_config().providers[channel]
    provider_class = import_string(path)
    provider: Provider = provider_class()
    return provider


def provider_account(channel: str) -> str:
    """The provider account a channel sends from (for ``channel:account`` rate limits), or "".

    A provider says so with an optional ``account()`` method; one without it has no account.
    """
    account = getattr(get_provider(channel), "account", None)
    return str(account()) if callable(account) else ""


def _reset_providers(*, setting: str, **kwargs: object) -> None:
    if setting == "NOTIFICATIONS":
        get_provider.cache_clear()


setting_changed.connect(_reset_providers)
