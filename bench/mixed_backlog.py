"""Drain of a backlog accepted over HTTP (issue #23), against raw pika in the same run.

A backlog made the way a user's traffic makes it: single ``POST /api/v1/notifications`` to
gunicorn as deployed (gunicorn.conf.py, 2 workers), 16 connections, no worker running; half from
one client, then half from 16 clients in turn (each request the next client's token). So its
delivery messages are what the group commit published for that traffic (a group is one client's:
the clients in turn make groups of about one), not messages of DELIVERY_BATCH_SIZE ids as in
bench/drain.py. Those messages are then taken off the queue as they are and published again,
unchanged, once every ``rundramatiq --processes 2 --threads 8`` process has attached, so start-up
is not timed; timed from the first send (no-op provider) to the last notification delivered.
Also a one-client backlog accepted with ``ACCEPT_GROUP_SIZE=1`` (a message per notification).
"""

from __future__ import annotations

import json
import statistics
from dataclasses import dataclass
from typing import Any

from bench import raw_pika
from bench.accept_http import api_token, web_server
from bench.accept_sender import accepts_send
from bench.clients_accept import client_tokens
from bench.drain import Drain, backlog_drain, notifications_reset, queue_purge
from bench.harness import BROKER_URL, log
from bench.noop_provider import send_count, send_times, sends_clear


@dataclass(frozen=True)
class BacklogDrain:
    what: str
    accept_rate: float  # accepts/s over HTTP while the backlog was made
    messages: int  # delivery messages the accepts published
    drain: Drain

    @property
    def ids_per_message(self) -> float:
        return self.drain.count / self.messages


@dataclass(frozen=True)
class MixedBacklog:
    raw_pika: float  # messages/s, as many as the mixed backlog, 2 consumer processes: the mean of two runs
    mixed: BacklogDrain
    one_client_ungrouped: BacklogDrain

    @property
    def ratio(self) -> float:
        return self.mixed.drain.rate / self.raw_pika


def mixed_backlog(count: int) -> MixedBacklog:
    """The mixed backlog's drain between two runs of raw pika (their mean is its baseline, so a
    change in what else the machine does meanwhile falls on both), then the ungrouped one's."""
    raw = [_raw_pika(count)]
    mixed = _backlog_drain(
        f"{count // 2} from one client, then {count - count // 2} from 16 clients in turn",
        [(count // 2, [api_token()]), (count - count // 2, list(client_tokens()))],
    )
    log(f"mixed backlog: {mixed.drain.rate:.0f}/s, {mixed.ids_per_message:.1f} ids a message")
    raw.append(_raw_pika(count))
    ungrouped = _backlog_drain(f"{count} from one client, ACCEPT_GROUP_SIZE=1", [(count, [api_token()])], ACCEPT_GROUP_SIZE="1")
    log(f"one-client backlog, ACCEPT_GROUP_SIZE=1: {ungrouped.drain.rate:.0f}/s")
    return MixedBacklog(raw_pika=statistics.mean(raw), mixed=mixed, one_client_ungrouped=ungrouped)


def _raw_pika(count: int) -> float:
    log(f"raw pika: {count} persistent messages, 2 consumer processes")
    rate = raw_pika.throughput(count, consumers=2)
    log(f"raw pika: {rate:.0f}/s")
    return rate


def _backlog_drain(what: str, phases: list[tuple[int, list[str]]], **web_env: str) -> BacklogDrain:
    """Accept ``phases`` ((requests, tokens in turn), one after the other) over HTTP with no
    worker running, then drain the messages they published."""
    from notifications.models import Notification

    notifications_reset()
    queue_purge()
    sends_clear()
    accepted, seconds = 0, 0.0
    with web_server(workers=2, name="web-backlog", **web_env) as (url, _server):
        for number, (requests, tokens) in enumerate(phases):
            sent = accepts_send(url, count=requests, tokens=tokens, prefix=f"backlog-{number}")
            if sent.errors:
                raise SystemExit(f"bench: {sent.errors} of the backlog's {requests} accepts were not answered 202")
            accepted, seconds = accepted + requests, seconds + sent.seconds
    ids = [str(pk) for pk in Notification.objects.values_list("pk", flat=True)]
    taken = _messages_take()
    named = sum(len(json.loads(body)["args"]) for _, body in taken)
    if len(ids) != accepted or named != accepted:
        raise SystemExit(f"bench: {accepted} accepted, {len(ids)} stored, {named} named by the queued messages")

    def first_send() -> float | None:
        times = send_times()
        return times[0] if times else None

    drain = backlog_drain(ids, processes=2, first_send=first_send, sent=send_count, publish=lambda: _messages_put(taken))
    return BacklogDrain(what=what, accept_rate=accepted / seconds, messages=len(taken), drain=drain)


def _delivery_queue() -> str:
    from notifications.conf import delivery_route

    return delivery_route("high").queue_name


def _messages_take() -> list[tuple[Any, bytes]]:
    """Every message of the delivery queue (properties, body), taken off it."""
    import pika

    connection = pika.BlockingConnection(pika.URLParameters(BROKER_URL))
    try:
        channel = connection.channel()
        taken: list[tuple[Any, bytes]] = []
        last_tag = None
        while True:
            method, properties, body = channel.basic_get(queue=_delivery_queue(), auto_ack=False)
            if method is None:
                break
            taken.append((properties, body))
            last_tag = method.delivery_tag
        if last_tag is not None:
            channel.basic_ack(delivery_tag=last_tag, multiple=True)
        return taken
    finally:
        connection.close()


def _messages_put(taken: list[tuple[Any, bytes]]) -> None:
    """Publish the taken messages back, unchanged and in their order, in one AMQP transaction."""
    import pika

    connection = pika.BlockingConnection(pika.URLParameters(BROKER_URL))
    try:
        channel = connection.channel()
        channel.tx_select()
        for properties, body in taken:
            channel.basic_publish(exchange="", routing_key=_delivery_queue(), body=body, properties=properties)
        channel.tx_commit()
    finally:
        connection.close()
