"""The typed values of the options that are more than a number (rate limits, retry policies,
provider failover accounts) and their parsers; conf.get_config() reads the options through them."""

from __future__ import annotations

import json
import random
import re
from dataclasses import dataclass, field
from typing import Any

from django.core.exceptions import ImproperlyConfigured

from .channels.registry import CHANNEL_NAMES

# ``channel=N/s`` for the whole channel, or ``channel:account=N/s`` for one provider account (a
# Twilio account SID, an FCM project id, an SMTP login), which then has a bucket of its own.
_RATE_RE = re.compile(
    r"^\s*(?P<channel>[a-z_]+)(?::(?P<account>[^\s=:,]+))?\s*=\s*(?P<count>\d+(?:\.\d+)?)\s*/\s*(?P<unit>s|m|h)\s*$"
)
_UNIT_SECONDS = {"s": 1.0, "m": 60.0, "h": 3600.0}


@dataclass(frozen=True)
class RateLimit:
    """``count`` sends per ``per_seconds`` seconds, shared by every worker."""

    count: float
    per_seconds: float

    @property
    def per_second(self) -> float:
        return self.count / self.per_seconds


@dataclass(frozen=True)
class RetryPolicy:
    base_seconds: float
    cap_seconds: float
    max_attempts: int

    def delay_seconds(self, attempt_number: int, retry_after: float | None = None) -> float:
        """Exponential backoff with full jitter: uniform(0, min(cap, base * 2^(n-1))), and never
        sooner than a server's Retry-After, itself capped by the cap (a Retry-After of a day must
        not park a retry for a day)."""
        ceiling = min(self.cap_seconds, self.base_seconds * (2 ** max(0, attempt_number - 1)))
        return max(random.uniform(0, ceiling), min(retry_after or 0.0, self.cap_seconds))


def parse_rate_limits(value: str) -> dict[str, RateLimit]:
    """Parse ``"email=50/s,sms=10/s,sms:ACxxx=5/s"`` (units s, m, h; ``channel:account`` limits one
    provider account); a bad value fails loudly at start-up. Keys are ``channel`` or ``channel:account``."""
    limits: dict[str, RateLimit] = {}
    for part in filter(None, (p.strip() for p in value.split(","))):
        match = _RATE_RE.match(part)
        if not match:
            raise ImproperlyConfigured(
                f"NOTIFICATIONS_RATE_LIMITS: {part!r} is not of the form channel=N/s or channel:account=N/s "
                "(or /m, /h), "
                "e.g. NOTIFICATIONS_RATE_LIMITS='email=50/s,sms=10/s,push=100/s,webhook=20/s'"
            )
        channel, count = match["channel"], float(match["count"])
        if channel not in CHANNEL_NAMES:
            raise ImproperlyConfigured(
                f"NOTIFICATIONS_RATE_LIMITS: unknown channel {channel!r}; channels are {', '.join(CHANNEL_NAMES)}"
            )
        if count <= 0:
            raise ImproperlyConfigured(f"NOTIFICATIONS_RATE_LIMITS: the limit for {channel} must be above zero")
        name = f"{channel}:{match['account']}" if match["account"] else channel
        limits[name] = RateLimit(count=count, per_seconds=_UNIT_SECONDS[match["unit"]])
    return limits


@dataclass(frozen=True)
class CircuitPolicy:
    """A provider account's circuit opens after ``failures`` transient failures in a row within
    ``window_seconds``, and lets one probe through ``cooldown_seconds`` after it opened."""

    failures: int
    window_seconds: float
    cooldown_seconds: float


@dataclass(frozen=True)
class FailoverAccount:
    """A backup provider account: its name (metrics, attempts, ``channel:account`` rate limits)
    and the settings its provider is built with instead of the primary's."""

    name: str
    settings: dict[str, Any] = field(repr=False)


# The keys each channel's backup account takes: required, then optional with their types.
_FAILOVER_KEYS: dict[str, tuple[dict[str, type], dict[str, type]]] = {
    "sms": ({"account_sid": str, "auth_token": str}, {"from_number": str, "api_base": str}),
    "email": ({"host": str}, {"port": int, "username": str, "password": str, "use_tls": bool, "use_ssl": bool}),
}


def parse_failover_accounts(value: Any, *, variable: str, channel: str) -> tuple[FailoverAccount, ...]:
    """Parse a JSON list of backup accounts, e.g. SMS_FAILOVER_ACCOUNTS='[{"account_sid": "AC..",
    "auth_token": "..", "from_number": "+1.."}]' or EMAIL_FAILOVER_ACCOUNTS='[{"host":
    "smtp2.example.com", "port": 587, "username": "..", "password": "..", "use_tls": true}]'."""
    required, optional = _FAILOVER_KEYS[channel]
    try:
        items = json.loads(value) if isinstance(value, str) else value
    except ValueError as exc:
        raise ImproperlyConfigured(f"{variable}: not JSON ({exc}); give a list of objects") from None
    if not isinstance(items, list) or not all(isinstance(item, dict) for item in items):
        raise ImproperlyConfigured(f"{variable}: give a JSON list of objects, one per backup account")
    accounts: list[FailoverAccount] = []
    for number, item in enumerate(items, start=1):
        known = {**required, **optional}
        unknown = sorted(set(item) - set(known))
        missing = sorted(set(required) - {key for key in item if item[key]})
        if unknown or missing:
            raise ImproperlyConfigured(
                f"{variable}: account {number} "
                + (f"has unknown key(s) {', '.join(unknown)}" if unknown else f"lacks {', '.join(missing)}")
                + f"; keys are {', '.join(known)} ({', '.join(required)} required)"
            )
        for key, kind in known.items():
            if key in item and not (isinstance(item[key], kind) and (kind is bool or not isinstance(item[key], bool))):
                raise ImproperlyConfigured(f"{variable}: account {number}'s {key} must be a {kind.__name__}")
        if channel == "sms":
            name = str(item["account_sid"])
        else:
            # The relay is part of the name: an SMTP login alone is often shared (SendGrid's is
            # "apikey" for every account), and two accounts of one name would share one circuit.
            relay = f"{item['host']}:{item.get('port', 25)}"
            name = f"{item['username']}@{relay}" if item.get("username") else relay
        if any(account.name == name for account in accounts):
            raise ImproperlyConfigured(f"{variable}: account {name!r} is listed twice")
        accounts.append(FailoverAccount(name=name, settings=dict(item)))
    return tuple(accounts)


def parse_retry_policies(value: str) -> dict[str, RetryPolicy]:
    """Parse ``"sms=2:60:3,webhook=10:600:8"`` as channel=base_seconds:cap_seconds:max_attempts."""
    policies: dict[str, RetryPolicy] = {}
    for part in filter(None, (p.strip() for p in value.split(","))):
        channel, _, spec = part.partition("=")
        numbers = spec.split(":")
        try:
            if channel.strip() not in CHANNEL_NAMES or len(numbers) != 3:
                raise ValueError
            policy = RetryPolicy(float(numbers[0]), float(numbers[1]), int(numbers[2]))
            if policy.base_seconds <= 0 or policy.cap_seconds < policy.base_seconds or policy.max_attempts < 1:
                raise ValueError
        except ValueError:
            raise ImproperlyConfigured(
                f"NOTIFICATIONS_RETRY_POLICIES: {part!r} is not channel=base_seconds:cap_seconds:max_attempts "
                f"with a known channel, e.g. 'sms=2:60:3'"
            ) from None
        policies[channel.strip()] = policy
    return policies


@dataclass(frozen=True)
class InboxOptions:
    """The in-app inbox's options: the stream's heartbeat, how long its events are kept for a
    resume (Last-Event-ID), whether /inbox/demo/ is served (default: with DEBUG), the caps on open
    streams (per user, per client, per process) and how long a stream may wait on its reader."""

    heartbeat_seconds: float
    event_retention_seconds: float
    demo: bool
    streams_per_user: int = 5
    streams_per_client: int = 10000
    streams_per_process: int = 4000
    send_timeout_seconds: float = 30.0
