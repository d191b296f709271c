"""The app's options: a cached, typed, validated view of ``settings.NOTIFICATIONS``.

The options are declared in notifications/options/app.py (variable, type, default, bounds); each
fills the field of its lower-case name, or a composed one (a retry policy, the circuit, the event
consumer's). Code reads them here, never from settings.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass, field, fields
from typing import Any, TypeVar

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
from .option_values import parse_rate_limits as parse_rate_limits
from .option_values import parse_retry_policies as parse_retry_policies
from .options import APP_OPTIONS_BY_NAME
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

_Config = TypeVar("_Config")


@dataclass(frozen=True)
class EventsConfig:
    """The event consumer's topology and limits (notifications/events/): the EVENTS_* options."""

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
    template_cache_bytes: int
    template_sandbox_processes: int
    template_sandbox_memory_bytes: int
    template_sandbox_cpu_seconds: int
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
    webhook_secret_grace_seconds: float
    webhook_legacy_signature_headers: bool
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
    failover_accounts: dict[str, tuple[FailoverAccount, ...]] = field(repr=False)
    circuit: CircuitPolicy
    inbox: InboxOptions

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


def _retry_policy(variable: str, value: str) -> RetryPolicy:
    """``base_seconds:cap_seconds:max_attempts``, e.g. ``10:1800:8``."""
    try:
        base, cap, attempts = value.split(":")
        policy = RetryPolicy(float(base), float(cap), int(attempts))
        if not (0 < policy.base_seconds <= policy.cap_seconds) or policy.max_attempts < 1:
            raise ValueError
    except ValueError:
        raise ImproperlyConfigured(
            f"{variable}: {value!r} is not base_seconds:cap_seconds:max_attempts with 0 < base <= cap and at least "
            "one attempt, e.g. '10:1800:8'"
        ) from None
    return policy


def _option_values() -> dict[str, Any]:
    """Every app option typed and within its bounds (the environment's, or a settings override's),
    by name; a key nobody declared is a typo worth stopping for."""
    given: dict[str, Any] = dict(getattr(settings, "NOTIFICATIONS", {}) or {})
    unknown = sorted(set(given) - set(APP_OPTIONS_BY_NAME))
    if unknown:
        raise ImproperlyConfigured(
            f"NOTIFICATIONS: unknown option(s) {', '.join(unknown)}; known: {', '.join(APP_OPTIONS_BY_NAME)}"
        )
    return {name: option.parse(given.get(name)) for name, option in APP_OPTIONS_BY_NAME.items()}


def _from_options(cls: type[_Config], values: dict[str, Any], prefix: str) -> _Config:
    """A config dataclass whose every field is the option named ``prefix`` + the field, upper-case."""
    return cls(**{item.name: values[prefix + item.name.upper()] for item in fields(cls)})  # type: ignore[arg-type]


@functools.cache
def get_config() -> NotificationsConfig:
    values = _option_values()
    _lease_longer_than_deadlines(values, "SENDING_TIMEOUT_SECONDS")
    public_base_url = _public_base_url(values["PUBLIC_BASE_URL"])
    # The fields an option does not fill as it is, by its own name.
    composed: dict[str, Any] = {
        "rate_limits": parse_rate_limits(values["RATE_LIMITS"]),
        "default_retry_policy": RetryPolicy(
            values["RETRY_BASE_SECONDS"], values["RETRY_CAP_SECONDS"], values["RETRY_MAX_ATTEMPTS"]
        ),
        "retry_policies": parse_retry_policies(values["RETRY_POLICIES"]),
        "webhook_allow_hosts": tuple(host.lower() for host in values["WEBHOOK_ALLOW_HOSTS"]),
        "status_webhook_retry_policy": _retry_policy("STATUS_WEBHOOK_RETRY_POLICY", values["STATUS_WEBHOOK_RETRY_POLICY"]),
        # A channel registered after start-up (a test's) has no option of its own: its default provider.
        "providers": {name: values.get(f"{name.upper()}_PROVIDER") or spec.default_provider for name, spec in CHANNELS.items()},
        "events": _from_options(EventsConfig, values, "EVENTS_"),
        "default_locale": _default_locale(values["DEFAULT_LOCALE"]),
        "public_base_url": public_base_url,
        "provider_callback_base_url": public_base_url if _given("PUBLIC_BASE_URL") else "",
        "twilio_api_base": values["TWILIO_API_BASE"].rstrip("/"),
        "fcm_api_base": values["FCM_API_BASE"].rstrip("/"),
        "api_auth_failure_rate": values["API_AUTH_FAILURE_RATE"].replace(" ", ""),
        "failover_accounts": {
            channel: parse_failover_accounts(values[key], variable=key, channel=channel)
            for channel, key in (("sms", "SMS_FAILOVER_ACCOUNTS"), ("email", "EMAIL_FAILOVER_ACCOUNTS"))
            if values[key]
        },
        "circuit": _from_options(CircuitPolicy, values, "PROVIDER_CIRCUIT_"),
        "inbox": InboxOptions(
            values["INBOX_STREAM_HEARTBEAT_SECONDS"],
            values["INBOX_EVENT_RETENTION_SECONDS"],
            # The demo page is served where DEBUG is on (make run), in production only when asked.
            demo=settings.DEBUG or values["INBOX_DEMO"],
            streams_per_user=values["INBOX_STREAMS_PER_USER"],
            streams_per_client=values["INBOX_STREAMS_PER_CLIENT"],
            streams_per_process=values["INBOX_STREAMS_PER_PROCESS"],
            send_timeout_seconds=values["INBOX_STREAM_SEND_TIMEOUT_SECONDS"],
        ),
    }
    return NotificationsConfig(
        **{
            item.name: composed[item.name] if item.name in composed else values[item.name.upper()]
            for item in fields(NotificationsConfig)
        }
    )


def _lease_longer_than_deadlines(values: dict[str, Any], key: str) -> None:
    """A lease (how long a claimed send is left alone) must outlast the longest send, or the
    sweeper takes a send back while it is still in flight and it goes out twice."""
    lease = values[key]
    for deadline_key in ("WEBHOOK_TIMEOUT_SECONDS", "PROVIDER_TIMEOUT_SECONDS"):
        deadline = values[deadline_key]
        if not lease > deadline:
            raise ImproperlyConfigured(
                f"{key} ({lease:g}) must be longer than {deadline_key} ({deadline:g}): a send still in flight "
                "would be taken back and sent twice"
            )


def _default_locale(value: str) -> str:
    try:
        return locale_normalize(value)
    except ValidationFailed:
        raise ImproperlyConfigured(f"DEFAULT_LOCALE: {value!r} is not a locale such as 'en' or 'fr-CA'") from None


def _given(key: str) -> bool:
    """Whether the environment (or a settings override) set the option, rather than its default."""
    return (getattr(settings, "NOTIFICATIONS", {}) or {}).get(key) is not None


def _public_base_url(value: str) -> str:
    url = value.rstrip("/")
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
