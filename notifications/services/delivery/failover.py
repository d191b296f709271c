"""Provider failover: the account of a channel a send goes through, and what its send tells the breaker.

A channel with backup accounts (SMS_FAILOVER_ACCOUNTS, EMAIL_FAILOVER_ACCOUNTS) sends through its
first account whose circuit is not open (notifications/circuit.py); a channel with one account
sends as it always did, with no breaker and no Redis call.

Redis down: the breaker fails open to the *primary* account. A circuit is shared state; without it
every worker would keep its own view and the accounts would be chosen at random. The primary is
where sends go when all is well, and a send without Redis is already rare (the shared rate limiter
pauses sends until Redis is back, notifications/ratelimit.py). Each pick made without Redis is
counted in ``notifications_degraded_total{component="circuit_breaker"}``.
"""

from __future__ import annotations

import smtplib
from dataclasses import dataclass

from ...channels.base import Provider
from ...channels.providers import failover_providers
from ...circuit import OPEN, circuit_allow, circuit_is_open, circuit_record
from ...conf import get_config
from ...degraded import RedisOutage
from ...errors import ChannelError, PermanentChannelError, TransientChannelError

outage = RedisOutage("circuit_breaker", consequence="provider failover is off (sends go to each channel's primary account)")


def provider_for_send(channel: str) -> tuple[str, Provider]:
    """The account (name, provider) the next send on ``channel`` goes through: the first whose
    circuit is closed, or half-open with this send as its one probe. When every circuit is open,
    the primary (its failure keeps it open; there is nowhere better to go)."""
    accounts = failover_providers(channel)
    if len(accounts) == 1:
        return accounts[0]

    def pick() -> tuple[str, Provider]:
        for name, provider in accounts:
            if circuit_allow(channel, name) != OPEN:
                return name, provider
        return accounts[0]

    return outage.call(pick, fallback=lambda: accounts[0])


def provider_send_record(channel: str, account: str, *, ok: bool) -> None:
    """Tell the account's breaker how its send went: ``ok`` when the provider answered (a delivery,
    or a permanent refusal of this message), not ok for a transient failure (5xx, timeout, 429).
    A send through no account of the channel (the test mode's capture sink) touches no circuit."""
    accounts = failover_providers(channel)
    if len(accounts) == 1 or account not in {name for name, _ in accounts}:
        return
    outage.call(lambda: circuit_record(channel, account, ok=ok), fallback=lambda: None, counted=False)


# Refusals that say the account itself cannot send (its credentials are wrong, revoked or
# missing), whatever the message: HTTP 401/403 from Twilio or FCM, SMTP 530 (authentication
# required) and 535 (credentials invalid).
ACCOUNT_HTTP_STATUSES = frozenset({401, 403})
ACCOUNT_SMTP_CODES = frozenset({530, 535})


def provider_error_is_account_level(exc: BaseException) -> bool:
    """Whether a send's error is the account's fault rather than the message's: then it counts
    against the account's circuit like a transient failure (``provider_send_record(ok=False)``),
    so sends move to a backup account, though the message itself fails permanently.

    Read from our channel error (its ``code`` "not_configured", its ``http_status``) and the SMTP
    reply it was raised from (channels/email/provider.py keeps smtplib's error as its cause)."""
    if isinstance(exc, ChannelError) and (exc.code == "not_configured" or exc.extra.get("http_status") in ACCOUNT_HTTP_STATUSES):
        return True
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, smtplib.SMTPResponseException) and current.smtp_code in ACCOUNT_SMTP_CODES:
            return True
        if (
            isinstance(current, smtplib.SMTPRecipientsRefused)
            and current.recipients
            and all(code in ACCOUNT_SMTP_CODES for code, _ in current.recipients.values())
        ):
            return True
        current = current.__cause__ or current.__context__
    return False


def account_refused(exc: PermanentChannelError) -> TransientChannelError:
    """An account-level refusal as what it is for the message: a transient error (it is retried,
    through a backup when there is one), code ``account_refused``, raised from the provider's."""
    error = TransientChannelError(str(exc), code="account_refused", extra=dict(exc.extra))
    error.__cause__ = exc
    return error


@dataclass(frozen=True)
class ProviderCircuit:
    channel: str
    account: str


def provider_circuits_open() -> list[ProviderCircuit]:
    """The accounts whose circuit is open or half-open now (the admin index); none while Redis is down."""
    accounts = [(channel, name) for channel in get_config().failover_accounts for name, _ in failover_providers(channel)]

    def read() -> list[ProviderCircuit]:
        return [ProviderCircuit(channel, name) for channel, name in accounts if circuit_is_open(channel, name)]

    return outage.call(read, fallback=list, counted=False)
