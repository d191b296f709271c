"""The shared write: single POST /notifications of different clients that a web process writes at
the same moment go in one statement and one AMQP transaction, each answered from that statement's
result, each notification's message carrying its own request's trace. Real requests through the API (threads of this
process, each with its own database connection), the real PostgreSQL and RabbitMQ.

To make a shared write deterministic, the first write (one request's, alone) waits until the
others are queued behind it; they are then written together."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import dramatiq
import pytest
from opentelemetry import trace
from rest_framework.test import APIClient

from notifications.conf import HIGH_QUEUE
from notifications.models import IdempotencyKey, Notification, Status
from notifications.services.intake import shared_write as accept_write
from notifications.tracing import TRACE_OPTION, TRACES_OPTION

from .factories import make_api_client
from .test_accept_group import body, drain, held_in_turn, post_together
from .test_tracing import spans  # noqa: F401  (fixture)

pytestmark = pytest.mark.django_db(transaction=True)

URL = "/api/v1/notifications"


@pytest.fixture
def writes(monkeypatch: pytest.MonkeyPatch) -> tuple[list[int], Callable[[int], None]]:
    """The groups in each shared write, and ``hold(n)``: the next write of one group waits until
    ``n`` groups are queued behind it, so those ``n`` are written together."""
    return held_in_turn(monkeypatch, accept_write, "_rows_write", lambda: accept_write.shared_writes.waiting)


def tokens(count: int) -> list[str]:
    return [make_api_client(f"client-{n}")[1] for n in range(count)]


def test_concurrent_accepts_of_different_clients_are_written_together_each_with_its_own_answer_message_and_trace(
    writes: tuple[list[int], Callable[[int], None]],
    broker: dramatiq.Broker,
    spans: Any,  # noqa: F811  (the fixture imported above)
) -> None:
    sizes, hold = writes
    hold(3)
    responses = post_together(tokens(4), [(f"w-{n}", body(n)) for n in range(4)])

    assert [r.status_code for r in responses] == [202] * 4, [r.content for r in responses]
    assert sorted(sizes) == [1, 3]  # the first alone, the three clients' behind it in one statement
    assert [r.headers.get("Idempotent-Replayed") for r in responses] == [None] * 4
    ids = [r.json()["id"] for r in responses]
    stored = {str(n.pk): n for n in Notification.objects.all()}
    assert set(stored) == set(ids)
    for n, notification_id in enumerate(ids):
        notification = stored[notification_id]
        assert (notification.client.name, notification.address, notification.status) == (
            f"client-{n}",
            f"u{n}@example.com",
            Status.QUEUED,
        )
        assert IdempotencyKey.objects.get(client=notification.client, key=f"w-{n}").response_body == responses[n].json()
    # The first's message; then one for the three clients' together, each id in its own request's trace.
    messages = drain(broker, HIGH_QUEUE)
    assert sorted(len(m.args) for m in messages) == [1, 3]
    assert sorted(pk for m in messages for pk in m.args) == sorted(ids)
    carried = {}
    for message in messages:
        if len(message.args) == 1:
            carried[message.args[0]] = message.options[TRACE_OPTION]["traceparent"]
        else:
            assert message.options[TRACE_OPTION] == {}
            carried.update({pk: carrier["traceparent"] for pk, carrier in message.options[TRACES_OPTION].items()})
    request_traces = {
        format(span.context.trace_id, "032x") for span in spans.get_finished_spans() if span.kind == trace.SpanKind.SERVER
    }
    traces = {pk: traceparent.split("-")[1] for pk, traceparent in carried.items()}
    assert traces == {pk: n.trace_id for pk, n in stored.items()} and set(traces.values()) == request_traces


def test_the_same_key_of_two_clients_in_one_write_makes_a_notification_for_each(
    writes: tuple[list[int], Callable[[int], None]],
) -> None:
    sizes, hold = writes
    first, second, third = tokens(3)
    hold(2)
    responses = post_together([first, second, third], [("lead", body(0)), ("same", body(1)), ("same", body(2))])

    assert [r.status_code for r in responses] == [202] * 3, [r.content for r in responses]
    assert sorted(sizes) == [1, 2]
    same = Notification.objects.filter(idempotency_key="same")
    assert sorted(same.values_list("client__name", "address")) == [
        ("client-1", "u1@example.com"),
        ("client-2", "u2@example.com"),
    ]


def test_a_key_its_client_already_used_replays_in_a_shared_write_while_another_clients_goes_in(
    writes: tuple[list[int], Callable[[int], None]],
) -> None:
    sizes, hold = writes
    lead, owner, other = tokens(3)
    api = APIClient()
    api.credentials(HTTP_AUTHORIZATION=f"Bearer {owner}")
    stored = api.post(URL, body(1), format="json", HTTP_IDEMPOTENCY_KEY="taken")
    assert stored.status_code == 202
    sizes.clear()
    hold(2)
    responses = post_together([lead, owner, other], [("lead", body(0)), ("taken", body(1)), ("taken", body(2))])

    assert [r.status_code for r in responses] == [202] * 3
    assert sorted(sizes) == [1, 2]
    assert responses[1].json() == stored.json() and responses[1].headers.get("Idempotent-Replayed") == "true"
    assert responses[2].headers.get("Idempotent-Replayed") is None
    assert responses[2].json()["id"] != stored.json()["id"]
    assert Notification.objects.filter(idempotency_key="taken").count() == 2


def test_a_shared_write_that_fails_leaves_each_of_its_requests_accepted_on_its_own(
    writes: tuple[list[int], Callable[[int], None]], monkeypatch: pytest.MonkeyPatch
) -> None:
    sizes, hold = writes
    real = accept_write.accept_rows_insert
    failed: list[int] = []

    def failing_once_when_shared(**kwargs: Any) -> Any:
        if not failed and len(kwargs["keys"]) > 1:
            failed.append(len(kwargs["keys"]))
            raise RuntimeError("a row of one group failed the statement")
        return real(**kwargs)

    monkeypatch.setattr(accept_write, "accept_rows_insert", failing_once_when_shared)
    hold(3)
    responses = post_together(tokens(4), [(f"f-{n}", body(n)) for n in range(4)])

    assert failed == [3]  # the write of three groups failed as a whole...
    # ...and each of them was accepted on its own, not answered 503 for another's row.
    assert [r.status_code for r in responses] == [202] * 4, [r.content for r in responses]
    assert [r.headers.get("Idempotent-Replayed") for r in responses] == [None] * 4
    assert Notification.objects.count() == 4 and IdempotencyKey.objects.count() == 4
