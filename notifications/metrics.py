"""Our Prometheus metrics: defined once here, with the same names and labels in every process."""

from __future__ import annotations

from prometheus_client import Counter, Histogram

# Provider calls are usually tens of milliseconds to a few seconds; the top buckets catch hangs
# up to the provider timeouts.
DELIVERY_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
# Accept -> delivered includes queueing, rate-limit waits and retries: seconds to hours.
END_TO_END_BUCKETS = (0.1, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0, 900.0, 3600.0, 14400.0)

notifications_sent = Counter(
    "notifications_sent",
    "Provider sends by outcome: delivered, transient (will retry), permanent, dead.",
    ["channel", "status"],
)
notification_delivery_seconds = Histogram(
    "notification_delivery_seconds",
    "Time spent in the provider call of one delivery attempt.",
    ["channel"],
    buckets=DELIVERY_BUCKETS,
)
notification_end_to_end_seconds = Histogram(
    "notification_end_to_end_seconds",
    "Time from accept to delivered.",
    ["channel"],
    buckets=END_TO_END_BUCKETS,
)
notification_retries = Counter(
    "notification_retries",
    "Retries scheduled, by the reason of the failure (error code).",
    ["channel", "reason"],
)
notification_rate_limited = Counter(
    "notification_rate_limited",
    "Sends postponed because the channel's shared rate limit had no free slot (or the provider said 429).",
    ["channel"],
)
notifications_processed = Counter(
    "notifications_processed",
    "Events handled by the consumer: success, duplicate, failed, failed_transient.",
    ["status"],
)
notifications_processing_seconds = Histogram(
    "notifications_processing_seconds",
    "Time the consumer spent on one event, from delivery to ack or nack.",
)
