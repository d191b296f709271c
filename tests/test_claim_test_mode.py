"""A test token's message is captured, never sent, whatever the delivery claim's statement returns
(issue #37): the claim reads its client's columns by name into a typed ClientSnapshot
(models/claims.py), so a column renamed or of the wrong kind fails the claim loudly instead of
defaulting to live. Real PostgreSQL and RabbitMQ, Dramatiq workers in this process, a local SMTP
server counting what is really sent."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import dramatiq
import pytest
from django.db import connection
from django.utils import timezone
from rest_framework.test import APIClient

from notifications import actors, services
from notifications.models import ApiClient, CapturedMessage, Notification, Status
from notifications.models.claims import claim_of_row
from notifications.services.delivery import backlog
from notifications.services.delivery import send as delivery
from notifications.services.records import outbox

from .factories import make_api_client
from .fakes import LocalSmtpServer, override_notifications, smtp_server_fixture  # noqa: F401  (fixture)
from .helpers import wait_until
from .test_backlog_delivery import UNLIMITED, accept_singles, recipients, waited


@pytest.fixture(autouse=True)
def fresh_pace(monkeypatch: pytest.MonkeyPatch) -> None:
    """No send pace measured and no channel paused yet in this process: each test starts alike."""
    monkeypatch.setattr(delivery, "_send_seconds", {})
    monkeypatch.setattr(backlog, "_paused_until", {})


@pytest.fixture
def no_publish(monkeypatch: pytest.MonkeyPatch) -> None:
    """Accepts publish no delivery message: the test delivers them itself."""
    monkeypatch.setattr(outbox, "delivery_message_send", lambda **kwargs: None)


Side = tuple[ApiClient, str]


@pytest.fixture
def sides(transactional_db: None) -> tuple[Side, Side]:
    """The client acme's live side and its test side (a test token's client), each with its token."""
    live = make_api_client("acme")
    test = services.api_client_test_token_issue(name="acme")
    return live, test


def api_for(token: str) -> APIClient:
    api = APIClient()
    api.credentials(HTTP_AUTHORIZATION=f"Bearer {token}")
    return api


def captured(ids: list[str]) -> set[str]:
    return {str(pk) for pk in CapturedMessage.objects.filter(notification_id__in=ids).values_list("notification_id", flat=True)}


def test_a_test_tokens_email_is_captured_by_a_worker_and_never_reaches_the_smtp_server(
    sides: tuple[Side, Side], worker: dramatiq.Worker, smtp_server: LocalSmtpServer
) -> None:
    (_, live_token), (_, test_token) = sides
    ids = {}
    for token, to in ((test_token, "test@example.com"), (live_token, "live@example.com")):
        response = api_for(token).post("/api/v1/notifications", {"user_id": "u1", "to": to, "message": "hi"}, format="json")
        assert response.status_code == 202, response.content
        ids[to] = response.json()["id"]
    wait_until(lambda: Notification.objects.filter(pk__in=ids.values(), status=Status.DELIVERED).count() == 2, timeout=30)
    # The live one went to the SMTP server, so it was listening; the test one never did.
    assert recipients(smtp_server) == ["live@example.com"]
    assert captured(list(ids.values())) == {ids["test@example.com"]}


def test_a_test_tokens_emails_taken_by_a_live_messages_backlog_claim_are_captured_never_sent(
    sides: tuple[Side, Side], no_publish: None, smtp_server: LocalSmtpServer
) -> None:
    (live, _), (test, _) = sides
    test_ids = accept_singles(test, 4, prefix="t")
    waited(test_ids)
    [own] = accept_singles(live, 1, prefix="live")
    delivery._send_seconds["email"] = 0.001  # a fast channel: the claim takes the whole backlog
    with override_notifications(RATE_LIMITS=UNLIMITED):
        # As the high queue's actor calls it: the live message's claim takes the test rows beside it.
        outcomes = services.notifications_deliver(notification_ids=[own], backlog_priority="high")
    assert {pk: outcome.outcome for pk, outcome in outcomes.items()} == dict.fromkeys([own, *test_ids], "delivered")
    assert recipients(smtp_server) == ["live0@example.com"]
    assert captured([own, *test_ids]) == set(test_ids)


def claim_rewritten(rewrite: Callable[[str], str]) -> Callable[..., Any]:
    """A wrapper of the database's statements (Django's ``connection.execute_wrapper``) that
    rewrites the claim's: the claim's SQL drifting from what its reader expects."""

    def wrapper(execute: Callable[..., Any], sql: str, params: Any, many: bool, context: dict[str, Any]) -> Any:
        return execute(rewrite(sql) if "AS client_is_test" in sql else sql, params, many, context)

    return wrapper


@pytest.fixture
def test_email(sides: tuple[Side, Side], no_publish: None) -> Iterator[str]:
    _, (test, _) = sides
    [pk] = accept_singles(test, 1, prefix="drift")
    yield pk


@pytest.mark.parametrize(
    ("rewrite", "error"),
    [
        (lambda sql: sql.replace("AS client_is_test", "AS client_test_mode"), KeyError),  # the alias renamed
        (lambda sql: sql.replace("SELECT c.is_test FROM", "SELECT NULL FROM"), TypeError),  # the column gone
    ],
    ids=["renamed", "null"],
)
def test_a_claim_whose_statement_drifts_from_its_test_mode_column_fails_loudly_and_sends_nothing(
    test_email: str, smtp_server: LocalSmtpServer, rewrite: Callable[[str], str], error: type[Exception]
) -> None:
    raised: Exception | None = None
    with connection.execute_wrapper(claim_rewritten(rewrite)):
        try:
            actors.deliver_notification(test_email)  # the actor's own code, in this thread
        except Exception as exc:
            raised = exc
    assert recipients(smtp_server) == [] and not CapturedMessage.objects.exists()
    assert isinstance(raised, error), raised
    # Claimed and not sent: the sweeper recovers it as any interrupted send.
    assert Notification.objects.get(pk=test_email).status == Status.SENDING


ROW = {
    "client_name": "acme",
    "client_webhook_secret": "whsec_1",
    "client_webhook_secrets_retired": "[]",
    "client_status_webhook_url": "",
    "client_is_test": True,
    "last_attempt_number": 0,
    "attempt_id": 7,
}


@pytest.mark.parametrize(
    ("columns", "error"),
    [
        ({name: value for name, value in ROW.items() if name != "client_is_test"}, KeyError),
        ({**ROW, "client_is_test": None}, TypeError),
        ({**ROW, "client_is_test": "false"}, TypeError),
        ({**ROW, "client_status_webhook_url": None}, TypeError),
    ],
    ids=["test-mode-missing", "test-mode-null", "test-mode-text", "url-null"],
)
def test_a_claim_row_lacking_a_client_column_or_of_the_wrong_kind_raises(columns: dict[str, Any], error: type[Exception]) -> None:
    with pytest.raises(error):
        claim_of_row(Notification(channel="email"), columns, now=timezone.now(), inserted=True, webhook_secret_grace_seconds=0)


def test_a_claim_row_says_its_clients_test_mode_and_carries_its_inserted_attempt() -> None:
    notification = Notification(channel="email")
    claim = claim_of_row(
        notification, {**ROW, "client_is_test": 1}, now=(now := timezone.now()), inserted=True, webhook_secret_grace_seconds=0
    )
    assert (claim.is_test, claim.client.name, claim.notification) == (True, "acme", notification)
    assert (claim.attempt.pk, claim.attempt.number, claim.attempt.started_at, claim.attempt.channel) == (7, 1, now, "email")
    live = claim_of_row(notification, {**ROW, "client_is_test": False}, now=now, inserted=False, webhook_secret_grace_seconds=0)
    assert (live.is_test, live.attempt.pk) == (False, None)  # not inserted: its caller inserts it
