"""The SMS channel's settings, read through conf: its Twilio accounts (TWILIO_* the primary,
SMS_FAILOVER_ACCOUNTS the backups), each the whole of what a send or a callback check needs."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ...conf import get_config


@dataclass(frozen=True)
class TwilioAccount:
    account_sid: str
    auth_token: str = field(repr=False)
    from_number: str
    api_base: str


def primary_account() -> TwilioAccount:
    """The account of TWILIO_*, read now (a settings change takes effect at the next send)."""
    config = get_config()
    return TwilioAccount(config.twilio_account_sid, config.twilio_auth_token, config.twilio_from_number, config.twilio_api_base)


def backup_account(settings: Mapping[str, Any]) -> TwilioAccount:
    """One entry of SMS_FAILOVER_ACCOUNTS: its own SID and token; the primary's number and API base
    unless it names its own."""
    primary = primary_account()
    return TwilioAccount(
        account_sid=str(settings["account_sid"]),
        auth_token=str(settings["auth_token"]),
        from_number=str(settings.get("from_number") or primary.from_number),
        api_base=str(settings.get("api_base") or primary.api_base).rstrip("/"),
    )


def auth_tokens() -> list[str]:
    """Every auth token a status callback may be signed with, each once: Twilio signs with the
    token of the account that sent the message, the primary's or a backup's (a message sent while
    the primary's circuit was open)."""
    backups = [str(account.settings.get("auth_token") or "") for account in get_config().failover_accounts.get("sms", ())]
    return list(dict.fromkeys(token for token in (get_config().twilio_auth_token, *backups) if token))
