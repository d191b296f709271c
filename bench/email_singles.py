"""Email drain of a backlog of single accepts against django-post_office (issue #23): 1,000 emails,
each its own ``notification_accept`` call (4 threads, no worker running, so each is a message of
one id, as single API requests make them), drained by ``rundramatiq --processes 2 --threads 8``;
against ``send_queued_mail --processes 2`` on the same SMTP sink (bench/smtp_sink.py) and the same
PostgreSQL server (bench/post_office_drain.py), in alternating rounds.

The accepts' own messages are taken off the queue once written and published again, unchanged (their
ids, options and trace context), in one AMQP transaction once both worker processes have attached,
so the two processes' start-up is outside what is timed, as post_office's pool starts before it
sends. Both are timed from the first message at the sink to the last recorded as sent. Besides CPU
per email (bench/cpu.py; ours from the end of that publish), each sender's transactions per email: ``xact_commit`` of its own database
(pg_stat_database, read-only statements in autocommit included) from the publish (ours) or the
queueing (post_office) to the end.
"""

from __future__ import annotations

import statistics
import threading
import time
from dataclasses import dataclass
from typing import Any

from bench.cpu import CpuMeter
from bench.drain import Drain, api_client, consumer_count, delivered_count, notifications_reset, queue_purge
from bench.harness import DATABASE, EMAIL_PROVIDER, POST_OFFICE_DATABASE, log, psql, wait_for, workers
from bench.post_office_drain import Sink, post_office, post_office_migrate

EMAILS = 1000
ACCEPT_THREADS = 4


def backlog_accept_singles(count: int, *, tag: str) -> None:
    """``count`` emails, one ``notification_accept`` call each, from ACCEPT_THREADS threads."""
    from django.db import connection

    from notifications import services

    client = api_client()
    failures: list[BaseException] = []

    def accept(indexes: range) -> None:
        try:
            for index in indexes:
                payload = {
                    "user_id": f"u{index}",
                    "subject": f"Bench {index}",
                    "message": f"Hello u{index}, bench.",
                    "to": f"u{index}@example.com",
                }
                services.notification_accept(
                    client=client,
                    request=services.NotificationRequest(**payload),
                    idempotency_key=f"{tag}-{index}",
                    fingerprint=services.request_fingerprint(payload),
                )
        except BaseException as exc:  # reported below
            failures.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=accept, args=(range(n, count, ACCEPT_THREADS),)) for n in range(ACCEPT_THREADS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if failures:
        raise SystemExit(f"bench: an accept failed: {failures[0]!r}")


def _queue() -> str:
    from notifications.conf import delivery_route

    return delivery_route("high").queue_name


def messages_take(count: int) -> list[tuple[Any, bytes]]:
    """The delivery queue's ``count`` messages (properties, body), taken off it."""
    import dramatiq

    channel = dramatiq.get_broker().channel
    wait_for(
        lambda: channel.queue_declare(queue=_queue(), durable=True, passive=True).method.message_count >= count,
        timeout=60,
        what=f"{count} delivery messages",
    )
    taken = []
    while True:
        method, properties, body = channel.basic_get(queue=_queue(), auto_ack=True)
        if method is None:
            break
        taken.append((properties, body))
    if len(taken) != count:
        raise SystemExit(f"bench: {len(taken)} delivery messages, not {count}: one per accept")
    return taken


def messages_publish(messages: list[tuple[Any, bytes]]) -> None:
    """Publish ``messages`` back, as they were, in one AMQP transaction."""
    import dramatiq

    channel = dramatiq.get_broker().connection.channel()
    channel.tx_select()
    for properties, body in messages:
        channel.basic_publish(exchange="", routing_key=_queue(), body=body, properties=properties)
    channel.tx_commit()
    channel.close()


def commits(database: str) -> int:
    """Transactions committed in ``database`` so far, once the counts have settled (backends flush
    their statistics within a second, and at exit)."""
    query = f"SELECT xact_commit FROM pg_stat_database WHERE datname = '{database}'"
    settled: list[int] = []

    def steady() -> bool:
        settled.append(int(psql(query)))
        return len(settled) > 1 and settled[-1] == settled[-2]

    wait_for(steady, timeout=10, what="pg_stat_database to settle", interval=0.6)
    return settled[-1]


@dataclass(frozen=True)
class Round:
    drain: Drain
    commits_per_email: float


def ours(count: int, *, round_number: int) -> Round:
    notifications_reset()
    queue_purge()
    started = time.monotonic()
    backlog_accept_singles(count, tag=f"singles-{round_number}")
    log(f"email singles round {round_number}: {count} accepts in {time.monotonic() - started:.1f}s, no worker running")
    messages = messages_take(count)
    with Sink(f"sink-singles-{round_number}") as sink:
        env = {
            "EMAIL_PROVIDER": EMAIL_PROVIDER,
            "EMAIL_BACKEND": "django.core.mail.backends.smtp.EmailBackend",
            "EMAIL_HOST": "127.0.0.1",
            "EMAIL_PORT": str(sink.port),
            "EMAIL_USE_TLS": "false",
        }
        with workers(processes=2, threads=8, name=f"workers-singles-{round_number}", **env) as running:
            wait_for(lambda: consumer_count() >= 2, timeout=120, what="2 worker processes to attach", watch=running)
            before = commits(DATABASE)
            meter = CpuMeter(workers=running.pid)
            messages_publish(messages)
            meter.start()  # after: publishing the backlog again is the bench's doing, not the drain's
            wait_for(lambda: sink.count() >= count, timeout=600, what=f"{count} sends", interval=0.02, watch=running)
            wait_for(lambda: delivered_count() >= count, timeout=60, what=f"{count} deliveries", interval=0.02, watch=running)
            finished = time.time()
            cpu = meter.read()
        first = sink.first()
        if first is None or sink.count() != count:
            raise SystemExit(f"bench: the sink received {sink.count()} emails, not {count}")
    spent = commits(DATABASE) - before
    return Round(Drain(count=count, processes=2, seconds=finished - first, cpu=cpu), spent / count)


def theirs(count: int, *, round_number: int) -> Round:
    before = commits(POST_OFFICE_DATABASE)
    drain = post_office(count, round_number=round_number)
    return Round(drain, (commits(POST_OFFICE_DATABASE) - before) / count)


@dataclass(frozen=True)
class SinglesComparison:
    ours: list[Round]
    post_office: list[Round]


def email_singles(*, rounds: int) -> SinglesComparison:
    """Alternate: ours, post_office, ours, ... ``rounds`` each."""
    post_office_migrate()
    mine: list[Round] = []
    other: list[Round] = []
    for number in range(1, rounds + 1):
        mine.append(ours(EMAILS, round_number=number))
        log(f"email singles round {number}: ours {mine[-1].drain.rate:.0f}/s")
        other.append(theirs(EMAILS, round_number=number))
        log(f"email singles round {number}: post_office {other[-1].drain.rate:.0f}/s")
    return SinglesComparison(ours=mine, post_office=other)


def section(result: SinglesComparison) -> list[str]:
    lines = [
        "## Email drain of a backlog of single accepts against django-post_office",
        "",
        f"{EMAILS} emails, each its own `notification_accept` call ({ACCEPT_THREADS} threads, no worker running: a "
        "message of one id each), drained by `rundramatiq --processes 2 --threads 8`; post_office's "
        "`send_queued_mail --processes 2` on the same sink and PostgreSQL (bench/email_singles.py).",
        "",
        "| Round | Ours emails/s | post_office emails/s | Ours / post_office |",
        "|---:|---:|---:|---:|",
    ]
    for number, (mine, other) in enumerate(zip(result.ours, result.post_office, strict=True), start=1):
        lines.append(f"| {number} | {mine.drain.rate:.0f} | {other.drain.rate:.0f} | {mine.drain.rate / other.drain.rate:.2f} |")
    mine_rate = statistics.median(r.drain.rate for r in result.ours)
    other_rate = statistics.median(r.drain.rate for r in result.post_office)
    lines += [
        f"| median | {mine_rate:.0f} | {other_rate:.0f} | **{mine_rate / other_rate:.2f}** (goal >= 1.0) |",
        "",
        "Per email, mean over the rounds: transactions committed in the sender's database (pg_stat_database "
        "`xact_commit`, reads in autocommit included) and CPU ms (sender processes; the whole PostgreSQL, RabbitMQ "
        "and Redis servers over the same window).",
        "",
        "| | Commits | Sender CPU | PostgreSQL | RabbitMQ | Redis | Total CPU |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for name, runs in (("Ours", result.ours), ("post_office", result.post_office)):
        cells = [
            statistics.mean(r.drain.cpu_ms_per_message(part) for r in runs)
            for part in ("workers", "postgresql", "rabbitmq", "redis")
        ]
        commits_mean = statistics.mean(r.commits_per_email for r in runs)
        lines.append(f"| {name} | {commits_mean:.2f} | " + " | ".join(f"{c:.2f}" for c in cells) + f" | {sum(cells):.2f} |")
    return lines
