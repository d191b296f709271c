"""Our Prometheus metrics: defined once here, with the same names and labels in every process."""

from __future__ import annotations

import contextlib
import glob
import logging
import os
import tempfile
import threading
from collections.abc import Callable, Iterator
from datetime import datetime
from typing import Any, Protocol

import dramatiq
from django.conf import settings
from django.http import HttpRequest, HttpResponse
from django.utils import timezone
from prometheus_client import (
    CONTENT_TYPE_LATEST,
    REGISTRY,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
    multiprocess,
    start_http_server,
    values,
)
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from .conf import BULK_QUEUE, HIGH_QUEUE, broker_connection_parameters, broker_is_embedded, get_config

logger = logging.getLogger(__name__)

# Provider calls are usually tens of milliseconds to a few seconds; the top buckets catch hangs
# up to the provider timeouts.
DELIVERY_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
# Accept -> delivered includes queueing, rate-limit waits and retries: seconds to hours.
END_TO_END_BUCKETS = (0.1, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0, 900.0, 3600.0, 14400.0)

notifications_sent = Counter(
    "notifications_sent",
    "Provider sends by outcome: delivered, transient (will retry), permanent, dead; mode test: a test token's, captured.",
    ["channel", "status", "mode"],
)
notification_delivery_seconds = Histogram(
    "notification_delivery_seconds",
    "Time spent in the provider call of one delivery attempt.",
    ["channel", "mode"],
    buckets=DELIVERY_BUCKETS,
)
notification_end_to_end_seconds = Histogram(
    "notification_end_to_end_seconds",
    "Time from accept to delivered.",
    ["channel", "mode"],
    buckets=END_TO_END_BUCKETS,
)
notification_retries = Counter(
    "notification_retries",
    "Retries scheduled, by the reason of the failure (error code).",
    ["channel", "reason", "mode"],
)
notification_rate_limited = Counter(
    "notification_rate_limited",
    "Sends postponed because the channel's shared rate limit had no free slot (or the provider said 429).",
    ["channel"],
)
notifications_accept_group_size = Histogram(
    "notifications_accept_group_size",
    "Single accepts of a web process written in one statement (group commit): 1 at low load, more as it rises.",
    buckets=(1, 2, 4, 8, 16, 32, 64),
)
notifications_suppressed = Counter(
    "notifications_suppressed",
    "Notifications not sent because the recipient's preferences forbid them: preference, unsubscribed, default_off.",
    ["channel", "reason", "mode"],
)
notifications_processed = Counter(
    "notifications_processed",
    "Events handled by the consumer: success, duplicate, failed, failed_transient.",
    ["status"],
)
dead_letter_ingest_errors = Counter(
    "notifications_dead_letter_ingest_errors",
    "DLQ messages the consumer could not record as they came (kept with their body only, or dropped).",
)
notifications_processing_seconds = Histogram(
    "notifications_processing_seconds",
    "Time the consumer spent on one event, from delivery to ack or nack.",
)
notifications_degraded = Counter(
    "notifications_degraded",
    "Requests and sends handled without Redis: throttle and auth_throttle let the request through "
    "uncounted, rate_limiter put the send back for later.",
    ["component"],
)
provider_attempts = Counter(
    "notifications_provider_attempts",
    "Delivery attempts by provider account (provider failover), by attempt outcome.",
    ["channel", "account", "outcome"],
)
provider_feedback_ignored = Counter(
    "notifications_provider_feedback_ignored",
    "Signed provider callbacks that named a notification but were ignored: recipient_mismatch (a Mailgun event "
    "for another address), message_id_mismatch (about another send of it).",
    ["provider", "reason"],
)
provider_circuit_open = Gauge(
    "notifications_provider_circuit_open",
    "1 while a provider account's circuit breaker is open or half-open (its sends go to the next account).",
    ["channel", "account"],
    # Workers open and close circuits in turn: the value last written, by whichever process wrote it.
    multiprocess_mode="mostrecent",
)


# --- Recording, called by services and the event consumer -------------------------------------

# The ``mode`` label: a test token's notifications (captured, never sent) apart from live ones,
# so dashboards and alerts can leave them out.
MODE_LIVE, MODE_TEST = "live", "test"


class InMode(Protocol):
    """What knows whether it is a test token's: an API client, or the client a claim read (models/claims.py)."""

    @property
    def is_test(self) -> bool: ...


def mode_of(client: InMode) -> str:
    """The ``mode`` label of a notification of ``client``: from the client the caller holds (the
    accept's, a delivery claim's snapshot), never a guess from attributes that may be missing."""
    return MODE_TEST if client.is_test else MODE_LIVE


# A DeliveryAttempt outcome -> the ``status`` label of notifications_sent.
_SENT_STATUS = {
    "delivered": "delivered",
    "transient_error": "transient",
    "interrupted": "transient",
    "permanent_error": "permanent",
}


def record_attempt(*, channel: str, outcome: str, seconds: float | None, account: str = "", mode: str = MODE_LIVE) -> None:
    """One finished delivery attempt; ``seconds`` is the provider call time when there was one;
    ``account``: the provider account it went through, when the provider has accounts."""
    notifications_sent.labels(channel=channel, status=_SENT_STATUS.get(outcome, outcome), mode=mode).inc()
    if account:
        provider_attempts.labels(channel=channel, account=account, outcome=outcome).inc()
    if seconds is not None:
        notification_delivery_seconds.labels(channel=channel, mode=mode).observe(seconds)


def record_provider_attempt(*, channel: str, account: str, outcome: str) -> None:
    """One finished attempt through a named provider account (a channel with failover accounts)."""
    provider_attempts.labels(channel=channel, account=account, outcome=outcome).inc()


def record_provider_feedback_ignored(*, provider: str, reason: str) -> None:
    provider_feedback_ignored.labels(provider=provider, reason=reason).inc()


def record_circuit(*, channel: str, account: str, open: bool) -> None:
    provider_circuit_open.labels(channel=channel, account=account).set(1 if open else 0)


def record_delivered(*, channel: str, accepted_at: datetime, mode: str = MODE_LIVE) -> None:
    seconds = max(0.0, (timezone.now() - accepted_at).total_seconds())
    notification_end_to_end_seconds.labels(channel=channel, mode=mode).observe(seconds)


def record_dead(*, channel: str, mode: str = MODE_LIVE) -> None:
    notifications_sent.labels(channel=channel, status="dead", mode=mode).inc()


def record_retry(*, channel: str, reason: str, mode: str = MODE_LIVE) -> None:
    notification_retries.labels(channel=channel, reason=reason, mode=mode).inc()


def record_rate_limited(*, channel: str) -> None:
    notification_rate_limited.labels(channel=channel).inc()


def record_accept_group(size: int) -> None:
    notifications_accept_group_size.observe(size)


def record_suppressed(*, channel: str, reason: str, mode: str = MODE_LIVE) -> None:
    notifications_suppressed.labels(channel=channel, reason=reason, mode=mode).inc()


def record_dead_letter_ingest_error() -> None:
    dead_letter_ingest_errors.inc()


def record_event_processed(*, status: str, seconds: float) -> None:
    """For the consumer: ``status`` is success, duplicate, failed or failed_transient."""
    notifications_processed.labels(status=status).inc()
    notifications_processing_seconds.observe(seconds)


def record_degraded(*, component: str) -> None:
    notifications_degraded.labels(component=component).inc()


# --- Scrape-time gauges (web process) ----------------------------------------------------------

BROKER_TIMEOUT_SECONDS = 1.0


def monitored_queues() -> list[str]:
    # .DQ holds delayed messages (retries, near-future sends); .XQ is dramatiq's own dead letters.
    queues = [f"{queue}{suffix}" for queue in (HIGH_QUEUE, BULK_QUEUE) for suffix in ("", ".DQ", ".XQ")]
    events = get_config().events
    # The event consumer's queue and its broker-side dead letters.
    queues += [name for name in (events.queue, events.dlq) if name]
    return queues


def broker_queue_sizes(queues: list[str], *, timeout: float = BROKER_TIMEOUT_SECONDS) -> dict[str, int]:
    """Ready-message counts by passive declare; queues that do not exist are left out."""
    import pika
    import pika.exceptions

    parameters = broker_connection_parameters(timeout=timeout)
    sizes: dict[str, int] = {}
    connection = pika.BlockingConnection(parameters)
    try:
        channel = connection.channel()
        for queue in queues:
            try:
                sizes[queue] = int(channel.queue_declare(queue=queue, passive=True).method.message_count)
            except pika.exceptions.ChannelClosedByBroker:
                # 404: the queue is not declared (yet); the broker closed the channel with it.
                channel = connection.channel()
    finally:
        with contextlib.suppress(Exception):
            connection.close()
    return sizes


class ScrapeTimeCollector(Collector):
    """``notification_queue_size{queue}`` from RabbitMQ and ``dlq_size`` from the database, read on
    every scrape so they are true whichever process serves them. A service that is down leaves its
    gauge out of that scrape rather than failing the whole scrape."""

    def describe(self) -> Iterator[Metric]:
        # Registering a collector without describe() makes prometheus_client call collect() on
        # register, i.e. query the broker and database whenever the URLconf loads (migrate, checks).
        yield GaugeMetricFamily("notification_queue_size", "Messages ready in each RabbitMQ queue.", labels=["queue"])
        yield GaugeMetricFamily("dlq_size", "Unresolved dead letters.")

    def collect(self) -> Iterator[Metric]:
        if not broker_is_embedded():
            try:
                sizes = broker_queue_sizes(monitored_queues())
            except Exception as exc:
                # One line, not a traceback: a down broker is seen on every scrape until it is back.
                logger.warning("could not read queue sizes from the broker: %s", exc)
            else:
                queue_size = GaugeMetricFamily(
                    "notification_queue_size", "Messages ready in each RabbitMQ queue.", labels=["queue"]
                )
                for queue, size in sizes.items():
                    queue_size.add_metric([queue], size)
                yield queue_size
        try:
            # Not at the top: this module is loaded with the broker's middleware, before the
            # app registry (and so any model) is ready.
            from .selectors import dead_letter_unresolved_count

            unresolved = dead_letter_unresolved_count()
        except Exception as exc:
            logger.warning("could not count dead letters: %s", exc)
        else:
            yield GaugeMetricFamily("dlq_size", "Unresolved dead letters.", value=unresolved)


_scrape_collector: ScrapeTimeCollector | None = None
_scrape_lock = threading.Lock()


def register_scrape_time_collector(registry: CollectorRegistry = REGISTRY) -> None:
    """Called by the web process's URLconf, so only the process serving /metrics reads the
    broker and database on scrape. Idempotent."""
    global _scrape_collector
    with _scrape_lock:
        if _scrape_collector is None:
            _scrape_collector = ScrapeTimeCollector()
            registry.register(_scrape_collector)


def web_metrics_export(request: HttpRequest) -> HttpResponse:
    """The web tier's ``/metrics``. Under gunicorn's several worker processes (multiprocess mode,
    see gunicorn.conf.py) it sums what every worker wrote, whichever worker answers, plus the
    scrape-time gauges; in one process it is the process's own registry."""
    if multiprocess_mode():
        registry = CollectorRegistry()
        multiprocess.MultiProcessCollector(registry)
        registry.register(ScrapeTimeCollector())
    else:
        register_scrape_time_collector()
        registry = REGISTRY
    return HttpResponse(generate_latest(registry), content_type=CONTENT_TYPE_LATEST)


# --- Exporters for the worker and consumer processes -------------------------------------------


def multiprocess_mode() -> bool:
    """Whether prometheus_client was imported with PROMETHEUS_MULTIPROC_DIR set (worker processes)."""
    return values.ValueClass is not values.MutexValue


def _process_registry() -> CollectorRegistry:
    if not multiprocess_mode():
        return REGISTRY
    registry = CollectorRegistry()
    multiprocess.MultiProcessCollector(registry)
    return registry


def serve_process_metrics(port: int, *, addr: str = "0.0.0.0") -> int:
    """Serve this process's metrics on ``port`` (0 = any free one) from a daemon thread; returns
    the port bound. For single-process commands such as ``consume_events``."""
    server, _thread = start_http_server(port, addr=addr, registry=_process_registry())
    return int(server.server_port)


def worker_metrics_environment() -> dict[str, str]:
    """Environment for ``python -m dramatiq``: prometheus_client's multiprocess mode must be on
    before it is first imported, in the parent of every worker process. Old files from earlier
    runs are removed so counters start from zero, as a restarted process's would."""
    directory = settings.WORKER_METRICS_DIR or tempfile.mkdtemp(prefix="notifications-worker-metrics-")
    os.makedirs(directory, exist_ok=True)
    for stale in glob.glob(os.path.join(directory, "*.db")):
        with contextlib.suppress(FileNotFoundError):
            os.remove(stale)
    return {"PROMETHEUS_MULTIPROC_DIR": directory}


def serve_worker_metrics() -> None:
    """Dramatiq fork process: serve what every worker process wrote to the multiprocess dir."""
    server, thread = start_http_server(
        settings.WORKER_METRICS_PORT, addr=settings.WORKER_METRICS_ADDR, registry=_process_registry()
    )
    logger.info("worker metrics on port %d", server.server_port)
    thread.join()


class WorkerMetricsMiddleware(dramatiq.Middleware):
    """Adds the metrics exporter as a Dramatiq fork process (port WORKER_METRICS_PORT) and marks a
    worker process's files dead when it stops, so its live gauges leave the totals."""

    @property
    def forks(self) -> list[Callable[[], Any]]:
        return [serve_worker_metrics] if multiprocess_mode() and settings.WORKER_METRICS_PORT else []

    def after_worker_shutdown(self, broker: dramatiq.Broker, worker: dramatiq.Worker) -> None:
        if multiprocess_mode():
            multiprocess.mark_process_dead(os.getpid())
