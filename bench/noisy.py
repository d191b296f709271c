"""The noisy neighbour (issue #22): client B's single webhook notifications, accept -> delivered,
while client A's broadcast to 6,000 webhook subscribers drains, against B's alone on the same
workers just before. Goal: B's p95 under 500 ms during A's broadcast.

As deployed where it matters: ``rundramatiq --processes 2 --threads 8`` and the default channel
rate limits (``webhook=20/s``, one bucket for every client), so A's broadcast takes minutes to
drain and B is measured for ``seconds`` of it, not to its end. Every webhook goes over HTTP to a
local receiver in the bench process that answers 200 at once. B's notifications are accepted
through the accept service in the bench process (no web server: the figure is the delivery
path's), one every 1/``rate`` s; each one's latency is ``delivered_at - created_at`` of its row.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from bench.drain import notifications_reset
from bench.end_to_end import Latencies
from bench.harness import free_port, log, wait_for, workers

CLIENT_A = "bench-noisy-a"
CLIENT_B = "bench-noisy-b"
# The default NOTIFICATIONS_RATE_LIMITS (notifications/conf.py), set explicitly: the bench's own
# environment makes every channel unlimited.
DEPLOYED_RATE_LIMITS = "email=50/s,sms=10/s,push=100/s,webhook=20/s"


@dataclass(frozen=True)
class Noisy:
    subscribers: int
    rate: float  # B's notifications per second
    alone: Latencies  # B's accept -> delivered with nothing else running
    during: Latencies  # the same while A's broadcast drains
    during_claimed: Latencies  # accept -> claimed by a worker (its attempt's start), during A's broadcast
    a_delivered_during: int  # A's deliveries while B was measured
    a_pending_after: int  # A's notifications not yet delivered when B's last one was: still draining
    b_undelivered: int


class _Receiver(BaseHTTPRequestHandler):
    def do_POST(self) -> None:  # noqa: N802 - http.server's name
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        self.send_response(200)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args: Any) -> None:
        pass


@contextmanager
def webhook_receiver() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", free_port()), _Receiver)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/hook"
    finally:
        server.shutdown()
        server.server_close()


def _clients(url: str, subscribers: int) -> tuple[Any, Any]:
    """A with ``subscribers`` recipients on its topic ``launch``, each with the receiver's URL; B."""
    from django.db import connection

    from notifications import services
    from notifications.models import ApiClient, Recipient, TopicSubscription

    a = services.api_client_get_or_create(name=CLIENT_A)
    b = services.api_client_get_or_create(name=CLIENT_B)
    ApiClient.objects.filter(pk__in=[a.pk, b.pk]).update(webhook_secret="bench-noisy-secret")
    Recipient.objects.filter(client=a).delete()
    Recipient.objects.bulk_create(Recipient(client=a, user_id=f"a{n}", webhook_url=f"{url}?a{n}") for n in range(subscribers))
    services.topic_upsert(client=a, key="launch", name="launch")
    topic_id = services.fanout.topics.topic_for_client(client=a, key="launch").pk
    quote = connection.ops.quote_name
    with connection.cursor() as cursor:
        cursor.execute(
            f"INSERT INTO {quote(TopicSubscription._meta.db_table)} (topic_id, recipient_id, created_at) "
            f"SELECT %s, id, now() FROM {quote(Recipient._meta.db_table)} WHERE client_id = %s ON CONFLICT DO NOTHING",
            [topic_id, a.pk],
        )
    a.refresh_from_db()
    b.refresh_from_db()
    return a, b


def _b_send(client: Any, url: str, *, tag: str, rate: float, seconds: float) -> list[str]:
    """B's single webhook notifications, one every 1/``rate`` s for ``seconds``; their ids."""
    from notifications import services

    ids: list[str] = []
    start = time.monotonic()
    for index in range(max(1, int(rate * seconds))):
        delay = start + index / rate - time.monotonic()
        if delay > 0:
            time.sleep(delay)
        payload = {"user_id": f"b{index}", "channel": "webhook", "to": url, "message": f"B {tag} {index}"}
        result = services.notification_accept(
            client=client,
            request=services.NotificationRequest(**payload),
            idempotency_key=f"{tag}-{index}",
            fingerprint=services.request_fingerprint(payload),
        )
        ids.append(result.notification_id)
    return ids


def _latencies(ids: list[str]) -> tuple[list[float], int]:
    from notifications.models import Notification

    rows = Notification.objects.filter(pk__in=ids).values_list("created_at", "delivered_at")
    done = [(delivered - created).total_seconds() for created, delivered in rows if delivered is not None]
    return done, len(ids) - len(done)


def _claim_latencies(ids: list[str]) -> list[float]:
    """Accept -> the first attempt's start (a worker thread took the message and its send slot;
    what follows is the wait for that slot and the POST)."""
    from notifications.models import DeliveryAttempt

    rows = DeliveryAttempt.objects.filter(notification_id__in=ids, number=1).values_list("notification__created_at", "started_at")
    return [(started - created).total_seconds() for created, started in rows]


def _delivered(ids: list[str]) -> bool:
    return _latencies(ids)[1] == 0


def _a_counts(client: Any) -> tuple[int, int]:
    """A's notifications delivered, and not (yet) delivered."""
    from notifications.models import Notification, Status

    mine = Notification.objects.filter(client=client)
    delivered = mine.filter(status=Status.DELIVERED).count()
    return delivered, mine.count() - delivered


def noisy_neighbour(*, subscribers: int = 6000, rate: float = 4.0, seconds: float = 30.0, alone_seconds: float = 10.0) -> Noisy:
    import dramatiq

    from bench.drain import consumer_count
    from notifications import services
    from notifications.conf import delivery_route

    notifications_reset()
    # Declared before the workers attach, so counting its consumers never meets a missing queue.
    dramatiq.get_broker().declare_queue(delivery_route("high").queue_name, ensure=True)
    with webhook_receiver() as url:
        host = url.split("/")[2]
        a, b = _clients(url, subscribers)
        env = {"NOTIFICATIONS_RATE_LIMITS": DEPLOYED_RATE_LIMITS, "WEBHOOK_ALLOW_HOSTS": host}
        with workers(processes=2, threads=8, name="noisy", **env) as running:
            wait_for(lambda: consumer_count() >= 2, timeout=120, what="the workers to attach", interval=0.2, watch=running)
            log(f"noisy: B alone, {rate:g}/s for {alone_seconds:g} s")
            alone_ids = _b_send(b, url, tag="alone", rate=rate, seconds=alone_seconds)
            wait_for(lambda: _delivered(alone_ids), timeout=60, what="B's notifications alone", interval=0.1, watch=running)
            log(f"noisy: A broadcasts to {subscribers:,}; B sends once A's deliveries have begun")
            payload = {"topic": "launch", "channel": "webhook", "message": "A's launch"}
            services.broadcast_create(
                client=a,
                request=services.BroadcastRequest(topic="launch", channel="webhook", message="A's launch"),
                idempotency_key="bench-noisy-launch",
                fingerprint=services.request_fingerprint({"broadcast": payload}),
            )
            wait_for(lambda: _a_counts(a)[0] >= 50, timeout=120, what="A's first deliveries", interval=0.1, watch=running)
            a_before = _a_counts(a)[0]
            during_ids = _b_send(b, url, tag="during", rate=rate, seconds=seconds)
            wait_for(
                lambda: _delivered(during_ids), timeout=120, what="B's notifications during A's", interval=0.1, watch=running
            )
            a_after, a_pending = _a_counts(a)
            log(f"noisy: A delivered {a_after - a_before:,} meanwhile, {a_pending:,} still pending")
    alone, _ = _latencies(alone_ids)
    during, undelivered = _latencies(during_ids)
    return Noisy(
        subscribers=subscribers,
        rate=rate,
        alone=Latencies.of(alone),
        during=Latencies.of(during),
        during_claimed=Latencies.of(_claim_latencies(during_ids)),
        a_delivered_during=a_after - a_before,
        a_pending_after=a_pending,
        b_undelivered=undelivered,
    )
