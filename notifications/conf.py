"""The app's options: a cached, typed, validated view of ``settings.NOTIFICATIONS``."""

from __future__ import annotations

import functools
import json
import random
import re
from dataclasses import dataclass, field
from typing import Any

import pika
from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.core.signals import setting_changed
from django.dispatch import receiver

from .channels.registry import CHANNEL_NAMES, CHANNELS
from .errors import ValidationFailed
from .locales import locale_normalize

# Delivery messages go to one queue per priority, addressed to its actor by name: the actors
# declare themselves with these names, and services enqueue by them without importing actors.
HIGH_QUEUE = "notifications.high"
BULK_QUEUE = "notifications.bulk"


@dataclass(frozen=True)
class DeliveryRoute:
    queue_name: str
    actor_name: str


DELIVERY_ROUTES = {
    "high": DeliveryRoute(HIGH_QUEUE, "deliver_notification"),
    "bulk": DeliveryRoute(BULK_QUEUE, "deliver_bulk_notification"),
}


def delivery_route(priority: str) -> DeliveryRoute:
    return DELIVERY_ROUTES.get(priority, DELIVERY_ROUTES["high"])


# Status events (a client's status webhooks) have a queue of their own, so a backlog of bulk sends
# never delays them, nor they a send.
STATUS_EVENT_QUEUE = "notifications.status"
STATUS_EVENT_ROUTE = DeliveryRoute(STATUS_EVENT_QUEUE, "deliver_status_event")

# A broadcast's fan-out (making its notifications, batch by batch) has a queue of its own: a long
# fan-out never sits in front of a send, and the sends it makes start while it goes on.
BROADCAST_QUEUE = "notifications.broadcasts"
BROADCAST_FAN_OUT_ROUTE = DeliveryRoute(BROADCAST_QUEUE, "fan_out_broadcast")

# A digest's close at its window's end: short work, on the high queue every worker consumes.
DIGEST_CLOSE_ROUTE = DeliveryRoute(HIGH_QUEUE, "close_digest")


# ``channel=N/s`` for the whole channel, or ``channel:account=N/s`` for one provider account (a
# Twilio account SID, an FCM project id, an SMTP login), which then has a bucket of its own.
_RATE_RE = re.compile(
    r"^\s*(?P<channel>[a-z_]+)(?::(?P<account>[^\s=:,]+))?\s*=\s*(?P<count>\d+(?:\.\d+)?)\s*/\s*(?P<unit>s|m|h)\s*$"
)
_UNIT_SECONDS = {"s": 1.0, "m": 60.0, "h": 3600.0}
# DRF's throttle rate format: requests per second, minute, hour or day ("20/min", "5/s").
_THROTTLE_RATE_RE = re.compile(r"^[1-9]\d*/(s|sec|second|m|min|minute|h|hour|d|day)$")


# Every option's default. ``settings.NOTIFICATIONS`` holds what the environment set (None when
# unset); the variable behind each key is the key itself unless ENVIRONMENT_NAMES says otherwise.
DEFAULTS: dict[str, Any] = {
    "IDEMPOTENCY_KEY_TTL_SECONDS": 24 * 3600,
    "MAX_MESSAGE_BYTES": 64 * 1024,
    # A message's render (subject, body, HTML part) stops after this much work: a template that
    # loops over large data fails, as one that renders past MAX_MESSAGE_BYTES does.
    "TEMPLATE_RENDER_SECONDS": 1.0,
    "RATE_LIMITS": "email=50/s,sms=10/s,push=100/s,webhook=20/s",
    # While API clients share a channel, how far ahead (seconds) one with a backlog may book its
    # rate-limit slots: another client's send waits about this long per busy client (ratelimit.py).
    "RATE_LIMIT_HOLD_SECONDS": 0.2,
    "RETRY_BASE_SECONDS": 5.0,
    "RETRY_CAP_SECONDS": 300.0,
    "RETRY_MAX_ATTEMPTS": 5,
    "RETRY_POLICIES": "",
    "SWEEPER_INTERVAL_SECONDS": 1.0,
    "QUEUED_TIMEOUT_SECONDS": 120.0,
    # Past the actor's time limit (120 s) so a slow send is not recovered while still in flight;
    # it must be longer than the send deadlines (WEBHOOK_TIMEOUT_SECONDS, PROVIDER_TIMEOUT_SECONDS).
    "SENDING_TIMEOUT_SECONDS": 300.0,
    "BROKER_DELAY_MAX_SECONDS": 30.0,
    # Ids a delivery message carries when work arrives together (a batch accept, a broadcast, a
    # sweep): the worker claims and records them in one statement each.
    "DELIVERY_BATCH_SIZE": 50,
    # Single accepts a web process writes in one transaction when they arrive at the same moment
    # (services/accept_group.py); 1 accepts each on its own.
    "ACCEPT_GROUP_SIZE": 64,
    # Notifications a broadcast's fan-out makes per transaction (one multi-row INSERT, one publish).
    "BROADCAST_BATCH_SIZE": 500,
    # A fan-out whose heartbeat is older than this is taken to be dead and enqueued again by the sweeper.
    "BROADCAST_STALE_SECONDS": 60.0,
    "RETENTION_DAYS": 30,
    "WEBHOOK_ALLOW_HOSTS": [],
    # The deadline of one webhook or status-webhook post: lookup, connect, send and the whole answer.
    "WEBHOOK_TIMEOUT_SECONDS": 10.0,
    # Longest wait for the name lookup of a webhook or status webhook host (the SSRF guard's): the
    # system resolver's own timeout can be tens of seconds, and an API request waits for it.
    "ADDRESS_LOOKUP_TIMEOUT_SECONDS": 2.0,
    # Worker threads one client's webhook and status-webhook endpoints may hold at once, over every
    # worker: a quarter of the 16 threads deploy/ runs (rundramatiq --processes 2 --threads 8).
    "WEBHOOK_CONCURRENCY_PER_CLIENT": 4,
    # base_seconds:cap_seconds:max_attempts of a status event's posts to its client's
    # status_webhook_url: about an hour and a half of tries before it is dead.
    "STATUS_WEBHOOK_RETRY_POLICY": "10:1800:8",
    "PROVIDERS": {},
    "TWILIO_API_BASE": "https://api.twilio.com",
    "TWILIO_ACCOUNT_SID": "",
    "TWILIO_AUTH_TOKEN": "",
    "TWILIO_FROM_NUMBER": "",
    "FCM_API_BASE": "https://fcm.googleapis.com",
    "FCM_PROJECT_ID": "",
    "FCM_ACCESS_TOKEN": "",
    # Verifies Mailgun's event webhooks (HMAC-SHA256 of timestamp + token); unset, every event is refused.
    "MAILGUN_WEBHOOK_SIGNING_KEY": "",
    # The deadline of one SMS or push provider call: connect, send and the whole answer.
    "PROVIDER_TIMEOUT_SECONDS": 10.0,
    # Provider failover: backup accounts tried after the primary (TWILIO_*, EMAIL_HOST...) while
    # its circuit is open, as JSON lists (see parse_failover_accounts); and the circuit breaker.
    "SMS_FAILOVER_ACCOUNTS": "",
    "EMAIL_FAILOVER_ACCOUNTS": "",
    "PROVIDER_CIRCUIT_FAILURES": 5,
    "PROVIDER_CIRCUIT_WINDOW_SECONDS": 60.0,
    "PROVIDER_CIRCUIT_COOLDOWN_SECONDS": 30.0,
    "EVENTS_API_CLIENT": "events",
    "EVENTS_EXCHANGE": "orders",
    "EVENTS_QUEUE": "notifications",
    "EVENTS_ROUTING_KEY": "order.created",
    "EVENTS_DLX": "orders.dlq",
    "EVENTS_DLQ": "notifications.dlq",
    "EVENTS_PREFETCH": 10,
    "EVENTS_MAX_REDELIVERIES": 10,
    "EVENTS_QUORUM_QUEUES": False,
    "EVENTS_TRANSIENT_RETRY_SECONDS": 2.0,
    "EVENTS_RECONNECT_BASE_SECONDS": 5.0,
    "EVENTS_RECONNECT_CAP_SECONDS": 300.0,
    "EVENTS_DEDUP_TTL_SECONDS": 24 * 3600,
    # The locale of the last resort when rendering a template (after the request's and the recipient's).
    "DEFAULT_LOCALE": "en",
    # Where recipients reach this platform: the one-click unsubscribe links (List-Unsubscribe) start with it.
    "PUBLIC_BASE_URL": "http://127.0.0.1:8000",
    # Failed API token authentications one client address may make before it is answered 429.
    "API_AUTH_FAILURE_RATE": "20/min",
    "API_TOKEN_CACHE_SECONDS": 5.0,
    # Per-client limits (an API client's own value, set in the admin, overrides each): the
    # subscribers one topic may have, and the broadcasts a client may start in any hour.
    "TOPIC_SUBSCRIBERS_MAX": 1_000_000,
    "BROADCASTS_PER_HOUR_MAX": 100,
}
ENVIRONMENT_NAMES = {"RATE_LIMITS": "NOTIFICATIONS_RATE_LIMITS", "RETRY_POLICIES": "NOTIFICATIONS_RETRY_POLICIES"}


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


@dataclass(frozen=True)
class EventsConfig:
    """The event consumer's topology and limits (see notifications/events.py)."""

    exchange: str
    queue: str
    routing_key: str
    dlx: str
    dlq: str
    prefetch: int
    max_redeliveries: int
    quorum_queues: bool
    transient_retry_seconds: float
    reconnect_base_seconds: float
    reconnect_cap_seconds: float
    dedup_ttl_seconds: int


@dataclass(frozen=True)
class NotificationsConfig:
    idempotency_key_ttl_seconds: int
    max_message_bytes: int
    template_render_seconds: float
    rate_limits: dict[str, RateLimit]
    rate_limit_hold_seconds: float
    default_retry_policy: RetryPolicy
    retry_policies: dict[str, RetryPolicy]
    sweeper_interval_seconds: float
    queued_timeout_seconds: float
    sending_timeout_seconds: float
    broker_delay_max_seconds: float
    delivery_batch_size: int
    accept_group_size: int
    broadcast_batch_size: int
    broadcast_stale_seconds: float
    retention_days: int
    webhook_allow_hosts: tuple[str, ...]
    webhook_timeout_seconds: float
    address_lookup_timeout_seconds: float
    webhook_concurrency_per_client: int
    status_webhook_retry_policy: RetryPolicy
    providers: dict[str, str]
    provider_timeout_seconds: float
    events_api_client: str
    events: EventsConfig
    default_locale: str
    public_base_url: str
    twilio_api_base: str
    twilio_account_sid: str
    twilio_auth_token: str = field(repr=False)
    twilio_from_number: str
    fcm_api_base: str
    fcm_project_id: str
    fcm_access_token: str = field(repr=False)
    api_auth_failure_rate: str
    api_token_cache_seconds: float
    topic_subscribers_max: int
    broadcasts_per_hour_max: int
    # PUBLIC_BASE_URL when it is set, else "": providers are then given no status callback URL
    # (the default, a loopback address, is one no provider could reach).
    provider_callback_base_url: str
    mailgun_webhook_signing_key: str = field(repr=False)
    # Backup provider accounts by channel, in order (the primary is not listed); and the breaker.
    failover_accounts: dict[str, tuple[FailoverAccount, ...]] = field(default_factory=dict, repr=False)
    circuit: CircuitPolicy = field(default_factory=lambda: CircuitPolicy(5, 60.0, 30.0))

    @property
    def send_deadline_seconds(self) -> float:
        """The longest an HTTP send (a webhook, a status webhook, a provider call) may take."""
        return max(self.webhook_timeout_seconds, self.provider_timeout_seconds)

    def retry_policy(self, channel: str) -> RetryPolicy:
        return self.retry_policies.get(channel, self.default_retry_policy)

    def rate_limit(self, channel: str, account: str = "") -> tuple[str, RateLimit] | None:
        """The limit a send on ``channel`` from provider ``account`` keeps to, with its bucket's name:
        the account's own limit when one is configured, else the channel's; None when unlimited."""
        for name in (f"{channel}:{account}" if account else "", channel):
            if name and name in self.rate_limits:
                return name, self.rate_limits[name]
        return None


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


def _retry_policy(raw: dict[str, Any], key: str) -> RetryPolicy:
    """``base_seconds:cap_seconds:max_attempts``, e.g. ``10:1800:8``."""
    try:
        base, cap, attempts = str(raw[key]).split(":")
        policy = RetryPolicy(float(base), float(cap), int(attempts))
        if not (0 < policy.base_seconds <= policy.cap_seconds) or policy.max_attempts < 1:
            raise ValueError
    except ValueError:
        raise ImproperlyConfigured(
            f"{key}: {raw[key]!r} is not base_seconds:cap_seconds:max_attempts with 0 < base <= cap and at least "
            "one attempt, e.g. '10:1800:8'"
        ) from None
    return policy


def _at_least(raw: dict[str, Any], key: str, minimum: float, kind: type = float) -> Any:
    """A numeric option that makes no sense below ``minimum`` (a retention of 0 days would purge
    every finished row; a zero timeout would recover sends still in flight)."""
    name = ENVIRONMENT_NAMES.get(key, key)
    try:
        value = kind(raw[key])
    except (TypeError, ValueError, OverflowError):
        raise ImproperlyConfigured(f"{name}: {raw[key]!r} is not a number") from None
    if not value >= minimum:  # also refuses NaN
        raise ImproperlyConfigured(f"{name} must be at least {minimum}, got {raw[key]!r}")
    return value


def _options() -> dict[str, Any]:
    """The options as set, over their defaults; a key nobody knows is a typo worth stopping for."""
    given: dict[str, Any] = dict(getattr(settings, "NOTIFICATIONS", {}) or {})
    unknown = sorted(set(given) - set(DEFAULTS))
    if unknown:
        raise ImproperlyConfigured(f"NOTIFICATIONS: unknown option(s) {', '.join(unknown)}; known: {', '.join(DEFAULTS)}")
    return {**DEFAULTS, **{key: value for key, value in given.items() if value is not None}}


@functools.cache
def get_config() -> NotificationsConfig:
    raw = _options()
    default_policy = RetryPolicy(
        _at_least(raw, "RETRY_BASE_SECONDS", 0.001, float),
        _at_least(raw, "RETRY_CAP_SECONDS", 0.001, float),
        _at_least(raw, "RETRY_MAX_ATTEMPTS", 1, int),
    )
    _lease_longer_than_deadlines(raw, "SENDING_TIMEOUT_SECONDS")
    return NotificationsConfig(
        idempotency_key_ttl_seconds=_at_least(raw, "IDEMPOTENCY_KEY_TTL_SECONDS", 1, int),
        max_message_bytes=_at_least(raw, "MAX_MESSAGE_BYTES", 1, int),
        template_render_seconds=_at_least(raw, "TEMPLATE_RENDER_SECONDS", 0.001, float),
        rate_limits=parse_rate_limits(raw["RATE_LIMITS"]),
        rate_limit_hold_seconds=_at_least(raw, "RATE_LIMIT_HOLD_SECONDS", 0.001, float),
        default_retry_policy=default_policy,
        retry_policies=parse_retry_policies(raw["RETRY_POLICIES"]),
        sweeper_interval_seconds=_at_least(raw, "SWEEPER_INTERVAL_SECONDS", 0.01, float),
        queued_timeout_seconds=_at_least(raw, "QUEUED_TIMEOUT_SECONDS", 1, float),
        sending_timeout_seconds=_at_least(raw, "SENDING_TIMEOUT_SECONDS", 1, float),
        broker_delay_max_seconds=_at_least(raw, "BROKER_DELAY_MAX_SECONDS", 0, float),
        delivery_batch_size=_at_least(raw, "DELIVERY_BATCH_SIZE", 1, int),
        accept_group_size=_at_least(raw, "ACCEPT_GROUP_SIZE", 1, int),
        broadcast_batch_size=_broadcast_batch_size(raw),
        broadcast_stale_seconds=_at_least(raw, "BROADCAST_STALE_SECONDS", 1, float),
        retention_days=_at_least(raw, "RETENTION_DAYS", 1, int),
        webhook_allow_hosts=tuple(h.strip().lower() for h in raw["WEBHOOK_ALLOW_HOSTS"] if h.strip()),
        webhook_timeout_seconds=_at_least(raw, "WEBHOOK_TIMEOUT_SECONDS", 0.1, float),
        address_lookup_timeout_seconds=_at_least(raw, "ADDRESS_LOOKUP_TIMEOUT_SECONDS", 0.01, float),
        webhook_concurrency_per_client=_at_least(raw, "WEBHOOK_CONCURRENCY_PER_CLIENT", 1, int),
        status_webhook_retry_policy=_retry_policy(raw, "STATUS_WEBHOOK_RETRY_POLICY"),
        providers={name: (raw["PROVIDERS"] or {}).get(name) or spec.default_provider for name, spec in CHANNELS.items()},
        provider_timeout_seconds=_at_least(raw, "PROVIDER_TIMEOUT_SECONDS", 0.1, float),
        events_api_client=str(raw["EVENTS_API_CLIENT"]),
        events=_events_config(raw),
        default_locale=_default_locale(raw["DEFAULT_LOCALE"]),
        public_base_url=_public_base_url(raw["PUBLIC_BASE_URL"]),
        twilio_api_base=str(raw["TWILIO_API_BASE"]).rstrip("/"),
        twilio_account_sid=str(raw["TWILIO_ACCOUNT_SID"]),
        twilio_auth_token=str(raw["TWILIO_AUTH_TOKEN"]),
        twilio_from_number=str(raw["TWILIO_FROM_NUMBER"]),
        fcm_api_base=str(raw["FCM_API_BASE"]).rstrip("/"),
        fcm_project_id=str(raw["FCM_PROJECT_ID"]),
        fcm_access_token=str(raw["FCM_ACCESS_TOKEN"]),
        api_auth_failure_rate=_throttle_rate(raw, "API_AUTH_FAILURE_RATE"),
        api_token_cache_seconds=_at_least(raw, "API_TOKEN_CACHE_SECONDS", 0, float),
        topic_subscribers_max=_at_least(raw, "TOPIC_SUBSCRIBERS_MAX", 1, int),
        broadcasts_per_hour_max=_at_least(raw, "BROADCASTS_PER_HOUR_MAX", 1, int),
        provider_callback_base_url=_public_base_url(raw["PUBLIC_BASE_URL"]) if _given("PUBLIC_BASE_URL") else "",
        mailgun_webhook_signing_key=str(raw["MAILGUN_WEBHOOK_SIGNING_KEY"]),
        failover_accounts={
            channel: parse_failover_accounts(raw[key], variable=key, channel=channel)
            for channel, key in (("sms", "SMS_FAILOVER_ACCOUNTS"), ("email", "EMAIL_FAILOVER_ACCOUNTS"))
            if raw[key]
        },
        circuit=CircuitPolicy(
            failures=_at_least(raw, "PROVIDER_CIRCUIT_FAILURES", 1, int),
            window_seconds=_at_least(raw, "PROVIDER_CIRCUIT_WINDOW_SECONDS", 0.1, float),
            cooldown_seconds=_at_least(raw, "PROVIDER_CIRCUIT_COOLDOWN_SECONDS", 0.1, float),
        ),
    )


def _lease_longer_than_deadlines(raw: dict[str, Any], key: str) -> None:
    """A lease (how long a claimed send is left alone) must outlast the longest send, or the
    sweeper takes a send back while it is still in flight and it goes out twice."""
    lease = _at_least(raw, key, 1, float)
    for deadline_key in ("WEBHOOK_TIMEOUT_SECONDS", "PROVIDER_TIMEOUT_SECONDS"):
        deadline = _at_least(raw, deadline_key, 0.1, float)
        if not lease > deadline:
            raise ImproperlyConfigured(
                f"{key} ({lease:g}) must be longer than {deadline_key} ({deadline:g}): a send still in flight "
                "would be taken back and sent twice"
            )


def _broadcast_batch_size(raw: dict[str, Any]) -> int:
    # A batch is one INSERT of ~30 parameters a row; PostgreSQL takes at most 65,535 parameters.
    size = int(_at_least(raw, "BROADCAST_BATCH_SIZE", 1, int))
    if size > 1000:
        raise ImproperlyConfigured(f"BROADCAST_BATCH_SIZE must be at most 1000, got {raw['BROADCAST_BATCH_SIZE']!r}")
    return size


def _throttle_rate(raw: dict[str, Any], key: str) -> str:
    value = str(raw[key]).replace(" ", "")
    if not _THROTTLE_RATE_RE.match(value):
        raise ImproperlyConfigured(f"{key}: {raw[key]!r} is not of the form N/s, N/min, N/hour or N/day, e.g. '20/min'")
    return value


def _events_config(raw: dict[str, Any]) -> EventsConfig:
    config = EventsConfig(
        exchange=str(raw["EVENTS_EXCHANGE"]),
        queue=str(raw["EVENTS_QUEUE"]),
        routing_key=str(raw["EVENTS_ROUTING_KEY"]),
        dlx=str(raw["EVENTS_DLX"]),
        dlq=str(raw["EVENTS_DLQ"]),
        prefetch=_at_least(raw, "EVENTS_PREFETCH", 1, int),
        max_redeliveries=_at_least(raw, "EVENTS_MAX_REDELIVERIES", 0, int),
        quorum_queues=bool(raw["EVENTS_QUORUM_QUEUES"]),
        transient_retry_seconds=_at_least(raw, "EVENTS_TRANSIENT_RETRY_SECONDS", 0.001, float),
        reconnect_base_seconds=_at_least(raw, "EVENTS_RECONNECT_BASE_SECONDS", 0.001, float),
        reconnect_cap_seconds=_at_least(raw, "EVENTS_RECONNECT_CAP_SECONDS", 0.001, float),
        dedup_ttl_seconds=_at_least(raw, "EVENTS_DEDUP_TTL_SECONDS", 1, int),
    )
    return config


def _default_locale(value: Any) -> str:
    try:
        return locale_normalize(str(value))
    except ValidationFailed:
        raise ImproperlyConfigured(f"DEFAULT_LOCALE: {value!r} is not a locale such as 'en' or 'fr-CA'") from None


def _given(key: str) -> bool:
    """Whether the environment (or a settings override) set the option, rather than its default."""
    return (getattr(settings, "NOTIFICATIONS", {}) or {}).get(key) is not None


def _public_base_url(value: Any) -> str:
    url = str(value).strip().rstrip("/")
    if not re.match(r"^https?://[^/?#\s]+(/[^?#\s]*)?$", url):
        raise ImproperlyConfigured(
            f"PUBLIC_BASE_URL: {value!r} is not an http(s) URL such as https://notify.example.com "
            "(the start of the one-click unsubscribe links in every email)"
        )
    return url


def broker_is_embedded() -> bool:
    """True on the embedded default (Dramatiq's in-process StubBroker, no RabbitMQ)."""
    return bool(settings.BROKER_IS_EMBEDDED)


def broker_connection_parameters(*, timeout: float | None = None) -> pika.URLParameters:
    """The one place RabbitMQ connection parameters are built, for the event consumer and
    publisher, the health check and the queue-size metrics. ``timeout`` bounds every step of a
    probe that must answer quickly (a health check, a scrape)."""
    parameters = pika.URLParameters(settings.BROKER_URL)
    parameters.heartbeat = 30
    parameters.blocked_connection_timeout = 30
    parameters.connection_attempts = 1
    if timeout is not None:
        parameters.socket_timeout = timeout
        parameters.blocked_connection_timeout = timeout
        parameters.stack_timeout = timeout * 2
        parameters.retry_delay = 0
    return parameters


def redis_client() -> Any | None:
    """The Redis client behind the cache (django-redis), shared by the rate limiter, the health
    check and the consumer; None on the embedded local-memory cache."""
    from django.core.cache import cache

    backend = getattr(cache, "client", None)
    if backend is None or not hasattr(backend, "get_client"):
        return None
    return backend.get_client(write=True)


@receiver(setting_changed)
def _reset_config(*, setting: str, **kwargs: Any) -> None:
    if setting == "NOTIFICATIONS":
        get_config.cache_clear()
