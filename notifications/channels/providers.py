"""Channel providers, looked up by channel name: the registry's default class, or the dotted path
``<NAME>_PROVIDER`` gives in settings."""

from __future__ import annotations

import functools

from django.core.exceptions import ImproperlyConfigured
from django.core.signals import setting_changed
from django.utils.module_loading import import_string

from ..conf import get_config
from .base import Provider
from .registry import CHANNELS


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


@functools.cache
def failover_providers(channel: str) -> tuple[tuple[str, Provider], ...]:
    """The provider accounts of a channel in order, by name: its primary (named by its
    ``account()``, else "primary" when it has backups), then the backups of SMS_FAILOVER_ACCOUNTS / EMAIL_FAILOVER_ACCOUNTS,
    each built by the channel's built-in provider class from the account's settings
    (its ``for_failover_account``, in the channel's folder)."""
    backups = get_config().failover_accounts.get(channel, ())
    primary = (provider_account(channel) or ("primary" if backups else ""), get_provider(channel))
    if not backups:
        return (primary,)
    for account in backups:
        # One name is one circuit (and one label in the metrics): a backup named as the primary
        # would open and close with it, and failover would never move a send anywhere.
        if account.name == primary[0]:
            variable = f"{channel.upper()}_FAILOVER_ACCOUNTS"
            raise ImproperlyConfigured(
                f"{variable}: account {account.name!r} is the primary account's own name; "
                "a backup must be another account (another account SID, SMTP login or relay)"
            )
    provider_class = import_string(CHANNELS[channel].default_provider)
    return (primary, *((account.name, provider_class.for_failover_account(account.settings)) for account in backups))


def _reset_providers(*, setting: str, **kwargs: object) -> None:
    if setting in ("NOTIFICATIONS", "EMAIL_HOST_USER"):
        get_provider.cache_clear()
        failover_providers.cache_clear()


setting_changed.connect(_reset_providers)
