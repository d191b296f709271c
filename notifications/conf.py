"""The app's options: a cached, typed, validated view of ``settings.NOTIFICATIONS``."""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass, field
from typing import Any

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.core.signals import setting_changed
from django.dispatch import receiver

from .channels.registry import CHANNELS

# Re-exported: conf stays the one gate every option and queue name is read through.
from .connections import broker_connection_parameters as broker_connection_parameters
from .connections import broker_is_embedded as broker_is_embedded
from .connections import redis_client as redis_client
from .errors import ValidationFailed
from .locales import locale_normalize
from .option_values import CircuitPolicy as CircuitPolicy
from .option_values import FailoverAccount as FailoverAccount
from .option_values import InboxOptions as InboxOptions
from .option_values import RateLimit as RateLimit
from .option_values import RetryPolicy as RetryPolicy
from .option_values import parse_failover_accounts as parse_failover_accounts
from .option_values import parse_inbox_options as parse_inbox_options
from .option_values import parse_rate_limits as parse_rate_limits
from .option_values import parse_retry_policies as parse_retry_policies
from .queues import BROADCAST_FAN_OUT_ROUTE as BROADCAST_FAN_OUT_ROUTE
from .queues import BROADCAST_QUEUE as BROADCAST_QUEUE
from .queues import BULK_QUEUE as BULK_QUEUE
from .queues import DELIVERY_ROUTES as DELIVERY_ROUTES
from .queues import DIGEST_CLOSE_ROUTE as DIGEST_CLOSE_ROUTE
from .queues import HIGH_QUEUE as HIGH_QUEUE
from .queues import STATUS_EVENT_QUEUE as STATUS_EVENT_QUEUE
from .queues import STATUS_EVENT_ROUTE as STATUS_EVENT_ROUTE
from .queues import DeliveryRoute as DeliveryRoute
from .queues import delivery_route as delivery_route

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
    "INBOX_STREAM_HEARTBEAT_SECONDS": 15.0,
    "INBOX_EVENT_RETENTION_SECONDS": 3600.0,
    "INBOX_DEMO": None,  # None: on with DEBUG
}
ENVIRONMENT_NAMES = {"RATE_LIMITS": "NOTIFICATIONS_RATE_LIMITS", "RETRY_POLICIES": "NOTIFICATIONS_RETRY_POLICIES"}


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
    inbox: InboxOptions = field(default_factory=lambda: InboxOptions(15.0, 3600.0, demo=False))

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
        inbox=parse_inbox_options(raw, debug=settings.DEBUG),
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


@receiver(setting_changed)
def _reset_config(*, setting: str, **kwargs: Any) -> None:
    if setting == "NOTIFICATIONS":
        get_config.cache_clear()
