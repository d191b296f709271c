"""Provider failover: a channel's backup accounts, the circuit breaker each account has in Redis
(open after N transient failures in a row, one probe after the cooldown, closed by its success),
what the breaker does while Redis is down, the metrics and the admin index. Two real SMTP servers
on 127.0.0.1 are the primary and the backup relay."""

from __future__ import annotations

import itertools
import smtplib
from collections.abc import Iterator
from typing import Any

import pytest
from django.core.exceptions import ImproperlyConfigured
from django.test import Client, override_settings
from prometheus_client import REGISTRY

from notifications import services
from notifications.circuit import OPEN, circuit_allow, circuit_is_open, circuit_record
from notifications.conf import get_config, parse_failover_accounts
from notifications.errors import PermanentChannelError, TransientChannelError
from notifications.models import AttemptOutcome, Notification, Status
from notifications.services.delivery import failover

from .factories import accept_notification, make_api_client
from .fakes import LocalSmtpServer, override_notifications, smtp_server_fixture  # noqa: F401  (fixture)
from .helpers import wait_until
from .test_degraded import cache_at

pytestmark = pytest.mark.django_db
_addresses = itertools.count(1)


@pytest.fixture
def backup_smtp() -> Iterator[LocalSmtpServer]:
    server = LocalSmtpServer()
    yield server
    server.stop()


@pytest.fixture
def two_relays(smtp_server: LocalSmtpServer, backup_smtp: LocalSmtpServer) -> Iterator[str]:
    """Email with the fixture's SMTP server as the primary and a second one as the backup; the
    circuit opens after 2 failures and half-opens 0.5 s later. Yields the backup's account name."""
    accounts = f'[{{"host": "127.0.0.1", "port": {backup_smtp.port}}}]'
    with override_notifications(
        EMAIL_FAILOVER_ACCOUNTS=accounts,
        PROVIDER_CIRCUIT_FAILURES=2,
        PROVIDER_CIRCUIT_WINDOW_SECONDS=30,
        PROVIDER_CIRCUIT_COOLDOWN_SECONDS=0.5,
    ):
        yield f"127.0.0.1:{backup_smtp.port}"
    failover.outage.reset()


class Overload:
    """Makes a relay answer every recipient with a 451 (a transient failure of the account) while
    ``on``; one wrapper for the whole test, since aiosmtpd binds its hooks per SMTP session."""

    def __init__(self, server: LocalSmtpServer) -> None:
        self.on = True
        accept = server.handler.handle_RCPT

        async def rcpt(server_: Any, session: Any, envelope: Any, address: str, rcpt_options: list[str]) -> str:
            if self.on:
                return "451 4.3.0 relay overloaded, try again later"
            return await accept(server_, session, envelope, address, rcpt_options)

        server.handler.handle_RCPT = rcpt  # type: ignore[method-assign]


def send_one(client: Any) -> Notification:
    """Accept one email and deliver it in this process; the notification afterwards."""
    notification = accept_notification(client, to=f"u{next(_addresses)}@example.com")
    services.notification_deliver(notification_id=notification.pk)
    notification.refresh_from_db()
    return notification


def last_account(notification: Notification) -> str:
    return notification.attempts.order_by("-number").values_list("account", flat=True)[0]


def gauge(account: str) -> float | None:
    return REGISTRY.get_sample_value("notifications_provider_circuit_open", {"channel": "email", "account": account})


def attempts_counted(account: str, outcome: str) -> float:
    labels = {"channel": "email", "account": account, "outcome": outcome}
    return REGISTRY.get_sample_value("notifications_provider_attempts_total", labels) or 0.0


def test_the_circuit_opens_after_n_failures_the_backup_delivers_and_a_probe_closes_it_after_the_cooldown(
    smtp_server: LocalSmtpServer, backup_smtp: LocalSmtpServer, two_relays: str
) -> None:
    client, _ = make_api_client()
    overload = Overload(smtp_server)
    backup_before = attempts_counted(two_relays, AttemptOutcome.DELIVERED)

    failed = [send_one(client) for _ in range(2)]
    assert [(n.status, last_account(n)) for n in failed] == [(Status.RETRYING, "primary")] * 2
    assert circuit_is_open("email", "primary") and gauge("primary") == 1

    moved = send_one(client)
    assert (moved.status, last_account(moved)) == (Status.DELIVERED, two_relays)
    assert [mail.rcpt_tos for mail in backup_smtp.received] == [[moved.address]]
    assert attempts_counted(two_relays, AttemptOutcome.DELIVERED) == backup_before + 1

    # The primary is healthy again; after the cooldown one send probes it, and its success closes it.
    overload.on = False
    probe = wait_until(
        lambda: n if last_account(n := send_one(client)) == "primary" else None, timeout=10, message="a probe to the primary"
    )
    assert probe.status == Status.DELIVERED
    assert not circuit_is_open("email", "primary") and gauge("primary") == 0
    follow = send_one(client)
    assert last_account(follow) == "primary"
    assert [mail.rcpt_tos for mail in smtp_server.received] == [[probe.address], [follow.address]]


def test_a_half_open_circuit_lets_one_probe_through_and_a_failed_probe_opens_it_again(two_relays: str) -> None:
    for _ in range(2):
        circuit_record("email", "primary", ok=False)
    assert circuit_allow("email", "primary") == OPEN
    answers: list[str] = []
    wait_until(lambda: answers.append(circuit_allow("email", "primary")) or answers[-1] != OPEN, timeout=5, message="half-open")
    assert answers[-1] == "probe"
    assert circuit_allow("email", "primary") == OPEN  # a second worker is not a second probe
    circuit_record("email", "primary", ok=False)
    assert circuit_allow("email", "primary") == OPEN and circuit_is_open("email", "primary")


def test_failures_that_are_not_in_a_row_do_not_open_the_circuit(two_relays: str) -> None:
    circuit_record("email", "primary", ok=False)
    circuit_record("email", "primary", ok=True)  # the provider answered: the row is broken
    circuit_record("email", "primary", ok=False)
    assert not circuit_is_open("email", "primary")
    assert failover.provider_for_send("email")[0] == "primary"


def test_with_redis_down_the_breaker_fails_open_to_the_primary_and_counts_it(two_relays: str) -> None:
    for _ in range(2):
        circuit_record("email", "primary", ok=False)
    assert failover.provider_for_send("email")[0] == two_relays
    before = REGISTRY.get_sample_value("notifications_degraded_total", {"component": "circuit_breaker"}) or 0.0

    with override_settings(CACHES=cache_at(1)):  # nothing listens on port 1
        picks = [failover.provider_for_send("email")[0] for _ in range(3)]
        failover.provider_send_record("email", "primary", ok=False)  # no error either
        assert failover.provider_circuits_open() == []

    assert picks == ["primary"] * 3
    after = REGISTRY.get_sample_value("notifications_degraded_total", {"component": "circuit_breaker"})
    assert after == before + 3
    failover.outage.reset()
    assert failover.provider_for_send("email")[0] == two_relays  # Redis back: the circuit is still open


def test_a_channel_without_backups_has_no_breaker(smtp_server: LocalSmtpServer) -> None:
    for _ in range(10):
        failover.provider_send_record("email", "", ok=False)
    assert failover.provider_for_send("email")[0] == ""
    assert failover.provider_circuits_open() == []


def test_the_admin_index_shows_open_circuits(admin_client: Client, two_relays: str) -> None:
    assert "circuit open" not in admin_client.get("/admin/").content.decode()
    for _ in range(2):
        circuit_record("email", "primary", ok=False)
    page = admin_client.get("/admin/").content.decode()
    assert "circuit open: email account primary" in page


@pytest.mark.parametrize(
    ("value", "said"),
    [
        ("not json", "not JSON"),
        ('{"host": "a"}', "a JSON list of objects"),
        ('[{"port": 25}]', "lacks host"),
        ('[{"host": "a", "colour": "red"}]', "unknown key(s) colour"),
        ('[{"host": "a", "port": "25"}]', "port must be a int"),
        ('[{"host": "a"}, {"host": "a"}]', "listed twice"),
    ],
)
def test_bad_failover_accounts_stop_start_up_naming_the_variable(value: str, said: str) -> None:
    with pytest.raises(ImproperlyConfigured, match="EMAIL_FAILOVER_ACCOUNTS") as caught:
        parse_failover_accounts(value, variable="EMAIL_FAILOVER_ACCOUNTS", channel="email")
    assert said in str(caught.value)


def test_sms_failover_accounts_are_named_by_their_sid_and_default_to_the_primarys_number() -> None:
    with override_notifications(
        SMS_FAILOVER_ACCOUNTS='[{"account_sid": "AC2", "auth_token": "t2"}]', TWILIO_FROM_NUMBER="+15005550006"
    ):
        [backup] = get_config().failover_accounts["sms"]
        assert backup.name == "AC2"
        from notifications.channels.providers import failover_providers

        (_, _), (name, provider) = failover_providers("sms")
        assert name == "AC2" and provider.account() == "AC2"  # type: ignore[attr-defined]
        assert provider.twilio_account().from_number == "+15005550006"  # type: ignore[attr-defined]


def test_email_backups_are_named_by_login_and_relay_so_a_shared_login_is_not_the_primarys_circuit() -> None:
    """SendGrid's SMTP login is "apikey" for every account: the primary's name and a backup's must differ."""
    backup = '[{"host": "smtp2.example.com", "port": 587, "username": "apikey", "password": "SG.backup"}]'
    with override_settings(EMAIL_HOST_USER="apikey"), override_notifications(EMAIL_FAILOVER_ACCOUNTS=backup):
        from notifications.channels.providers import failover_providers

        names = [name for name, _ in failover_providers("email")]
    assert names == ["apikey", "apikey@smtp2.example.com:587"]
    [relay_only] = parse_failover_accounts('[{"host": "smtp3.example.com"}]', variable="EMAIL_FAILOVER_ACCOUNTS", channel="email")
    assert relay_only.name == "smtp3.example.com:25"


def test_a_backup_that_is_the_primary_account_is_refused_naming_the_variable() -> None:
    from notifications.channels.providers import failover_providers

    backup = '[{"account_sid": "AC1", "auth_token": "t"}]'
    with (
        override_notifications(TWILIO_ACCOUNT_SID="AC1", SMS_FAILOVER_ACCOUNTS=backup),
        pytest.raises(ImproperlyConfigured, match="SMS_FAILOVER_ACCOUNTS") as caught,
    ):
        failover_providers("sms")
    assert "'AC1'" in str(caught.value)


@pytest.mark.parametrize(
    ("error", "account_level"),
    [
        (PermanentChannelError("Twilio rejected the send (HTTP 401)", code="rejected", extra={"http_status": 401}), True),
        (PermanentChannelError("FCM rejected the send (HTTP 403)", code="rejected", extra={"http_status": 403}), True),
        (PermanentChannelError("the sms channel is not configured", code="not_configured"), True),
        (PermanentChannelError("Twilio rejected the send (HTTP 400)", code="rejected", extra={"http_status": 400}), False),
        (TransientChannelError("HTTP 503", code="provider_unavailable", extra={"http_status": 503}), False),
        (PermanentChannelError("recipient refused"), False),
    ],
)
def test_provider_errors_that_say_the_account_cannot_send_are_account_level(error: Exception, account_level: bool) -> None:
    assert failover.provider_error_is_account_level(error) is account_level


@pytest.mark.parametrize(
    ("smtp_error", "account_level"),
    [
        (smtplib.SMTPAuthenticationError(535, b"5.7.8 Authentication credentials invalid"), True),
        (smtplib.SMTPSenderRefused(530, b"5.7.0 Authentication required", "noreply@example.com"), True),
        (smtplib.SMTPRecipientsRefused({"a@example.com": (530, b"5.7.0 Authentication required")}), True),
        (smtplib.SMTPDataError(554, b"5.7.1 Message rejected as spam"), False),
        (smtplib.SMTPRecipientsRefused({"a@example.com": (550, b"5.1.1 No such user")}), False),
    ],
)
def test_smtp_replies_530_and_535_are_account_level_as_raised_by_the_email_channel(
    smtp_error: Exception, account_level: bool
) -> None:
    """The email channel raises its channel error from smtplib's (channels/email/provider.py)."""
    try:
        try:
            raise smtp_error
        except smtplib.SMTPException as exc:
            raise PermanentChannelError(f"SMTP: {exc}") from exc
    except PermanentChannelError as raised:
        assert failover.provider_error_is_account_level(raised) is account_level


def test_a_relay_that_refuses_the_account_is_a_retry_and_opens_its_circuit_so_the_backup_delivers(
    smtp_server: LocalSmtpServer, backup_smtp: LocalSmtpServer, two_relays: str
) -> None:
    """A 530 (authentication required) says nothing of the recipient: the notification is retried,
    not failed, and the account's circuit counts it, so the next send goes to the backup."""
    client, _ = make_api_client()

    async def refuse(server_: Any, session: Any, envelope: Any, address: str, rcpt_options: list[str]) -> str:
        return "530 5.7.0 Authentication required"

    smtp_server.handler.handle_RCPT = refuse  # type: ignore[method-assign]
    refused = [send_one(client) for _ in range(2)]
    assert [(n.status, last_account(n)) for n in refused] == [(Status.RETRYING, "primary")] * 2
    # What the attempt says agrees with what became of it: a transient error, retried.
    assert {(a.outcome, a.error_class) for n in refused for a in n.attempts.all()} == {
        (AttemptOutcome.TRANSIENT_ERROR, "notifications.errors.TransientChannelError")
    }
    assert circuit_is_open("email", "primary")
    moved = send_one(client)
    assert (moved.status, last_account(moved)) == (Status.DELIVERED, two_relays)
