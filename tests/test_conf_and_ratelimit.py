"""Option parsing, and the shared GCRA rate limiter against the real Redis."""

from __future__ import annotations

import subprocess
import sys
import threading
import time

import pytest
from django.core.exceptions import ImproperlyConfigured
from django.test import override_settings

from notifications import services
from notifications.channels.providers import provider_account
from notifications.conf import RateLimit, RetryPolicy, get_config, parse_rate_limits, parse_retry_policies
from notifications.models import Status
from notifications.ratelimit import reserve_send_slot
from notifications.services import retry_delay_seconds

from .factories import accept_notification, make_api_client
from .fakes import TWILIO_SID, FakeProviderServer, override_notifications, provider_server_fixture  # noqa: F401
from .helpers import ROOT, platform_env


def test_rate_limits_parse_per_second_and_per_minute() -> None:
    limits = parse_rate_limits("email=50/s, sms=600/m,push=100/s")
    assert limits["email"] == RateLimit(50, 1) and limits["sms"].per_second == 10 and limits["push"].per_second == 100


def test_a_provider_account_may_have_a_limit_of_its_own_beside_the_channels() -> None:
    limits = parse_rate_limits("sms=10/s,sms:AC123=5/s,push:my-project=2/m")
    assert limits == {"sms": RateLimit(10, 1), "sms:AC123": RateLimit(5, 1), "push:my-project": RateLimit(2, 60)}
    with override_notifications(RATE_LIMITS="sms=10/s,sms:AC123=5/s"):
        config = get_config()
        assert config.rate_limit("sms", "AC123") == ("sms:AC123", RateLimit(5, 1))
        assert config.rate_limit("sms", "ACother") == ("sms", RateLimit(10, 1))
        assert config.rate_limit("sms") == ("sms", RateLimit(10, 1))
        assert config.rate_limit("push", "AC123") is None


@pytest.mark.parametrize(
    "value", ["email=50", "email=fast/s", "fax=1/s", "email=0/s", "email=5/d", "sms:=5/s", "sms:a:b=5/s", "fax:AC1=1/s"]
)
def test_bad_rate_limits_fail_with_the_culprit_named(value: str) -> None:
    with pytest.raises(ImproperlyConfigured, match="NOTIFICATIONS_RATE_LIMITS"):
        parse_rate_limits(value)


def manage_py_check(**env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(ROOT / "manage.py"), "check"],
        cwd=ROOT,
        env=platform_env(**env),
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.mark.parametrize(
    ("variable", "value", "said"),
    [
        ("NOTIFICATIONS_RATE_LIMITS", "email=fast/s", "NOTIFICATIONS_RATE_LIMITS: 'email=fast/s' is not of the form"),
        ("NOTIFICATIONS_RATE_LIMITS", "fax=1/s", "NOTIFICATIONS_RATE_LIMITS: unknown channel 'fax'"),
        ("NOTIFICATIONS_RETRY_POLICIES", "sms=2:1:3", "NOTIFICATIONS_RETRY_POLICIES: 'sms=2:1:3' is not"),
        ("RETENTION_DAYS", "0", "RETENTION_DAYS must be at least 1, got 0"),
        ("SENDING_TIMEOUT_SECONDS", "0", "SENDING_TIMEOUT_SECONDS must be at least 1, got 0"),
        ("SENDING_TIMEOUT_SECONDS", "10", "SENDING_TIMEOUT_SECONDS (10) must be longer than WEBHOOK_TIMEOUT_SECONDS (10)"),
        ("WEBHOOK_CONCURRENCY_PER_CLIENT", "0", "WEBHOOK_CONCURRENCY_PER_CLIENT must be at least 1, got 0"),
        ("BROADCAST_BATCH_SIZE", "5000", "BROADCAST_BATCH_SIZE must be at most 1000, got 5000"),
        ("RETRY_MAX_ATTEMPTS", "lots", "RETRY_MAX_ATTEMPTS: 'lots' is not a whole number"),
        # The project's own options (read by platform/settings.py) are refused the same way.
        ("EMAIL_PORT", "0", "EMAIL_PORT must be at least 1, got 0"),
        ("DEBUG", "maybe", "DEBUG: 'maybe' is not true or false"),
    ],
)
def test_an_invalid_setting_in_the_environment_fails_manage_py_check_with_one_line_naming_it(
    variable: str, value: str, said: str
) -> None:
    result = manage_py_check(**{variable: value})
    assert result.returncode == 1
    assert result.stderr.startswith("configuration error: " + said), result.stderr[-2000:]
    assert "Traceback" not in result.stderr and result.stderr.count("\n") == 1


def test_a_valid_per_account_limit_in_the_environment_passes_manage_py_check() -> None:
    result = manage_py_check(
        NOTIFICATIONS_RATE_LIMITS="email=50/s,sms=10/s,sms:AC123=5/s", NOTIFICATIONS_RETRY_POLICIES="sms=2:60:3"
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert "no issues" in result.stdout


def test_retry_policies_per_channel_override_the_default() -> None:
    assert parse_retry_policies("sms=2:60:3") == {"sms": RetryPolicy(2, 60, 3)}
    with pytest.raises(ImproperlyConfigured):
        parse_retry_policies("sms=2:1:3")


def test_backoff_is_full_jitter_capped_and_honours_retry_after() -> None:
    policy = get_config().retry_policy("email")
    delays = [retry_delay_seconds(channel="email", attempt_number=n) for n in range(1, 12) for _ in range(20)]
    assert all(0 <= d <= policy.cap_seconds for d in delays)
    assert max(retry_delay_seconds(channel="email", attempt_number=1) for _ in range(50)) <= policy.base_seconds
    assert retry_delay_seconds(channel="email", attempt_number=1, retry_after=42) >= 42
    # A provider asking for a day waits the policy's cap, not a day.
    assert retry_delay_seconds(channel="email", attempt_number=1, retry_after=86_400) == policy.cap_seconds


def test_override_settings_resets_the_cached_config() -> None:
    from django.conf import settings

    with override_settings(NOTIFICATIONS={**settings.NOTIFICATIONS, "RATE_LIMITS": "email=7/s"}):
        assert get_config().rate_limits["email"].count == 7
    assert get_config().rate_limits["email"].count == 50


def test_redis_reservations_are_spaced_by_the_limit_across_threads() -> None:
    from django.conf import settings

    with override_settings(NOTIFICATIONS={**settings.NOTIFICATIONS, "RATE_LIMITS": "sms=20/s"}):
        waits: list[float] = []
        lock = threading.Lock()

        def reserve() -> None:
            for _ in range(5):
                reservation = reserve_send_slot("sms", max_wait=10)
                assert reservation.reserved
                with lock:
                    waits.append(reservation.wait_seconds)

        threads = [threading.Thread(target=reserve) for _ in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        waits.sort()
        # 20 slots at 20/s: the last one is ~0.95 s out, each 50 ms after the one before.
        gaps = [b - a for a, b in zip(waits, waits[1:], strict=False)]
        assert len(waits) == 20
        assert 0.85 <= waits[-1] <= 1.1
        assert min(gaps) >= 0.03
        refused = reserve_send_slot("sms", max_wait=0.5)
        assert not refused.reserved and refused.wait_seconds > 0.3


@pytest.mark.django_db
def test_deliveries_keep_to_their_provider_accounts_own_limit(provider_server: FakeProviderServer) -> None:
    client, _ = make_api_client()
    # The channel allows plenty; the configured Twilio account allows one send a minute (a wait
    # the broker may hold: BROKER_DELAY_MAX_SECONDS above it).
    with override_notifications(RATE_LIMITS=f"sms=1000/s,sms:{TWILIO_SID}=1/m", BROKER_DELAY_MAX_SECONDS=120):
        assert provider_account("sms") == TWILIO_SID
        first, second = (accept_notification(client, channel="sms", to="+14155550123") for _ in range(2))
        assert services.notification_deliver(notification_id=first.pk).outcome == "delivered"
        with pytest.raises(services.SendRateLimited) as limited:
            services.notification_deliver(notification_id=second.pk)
        assert limited.value.retry_after > 50
        second.refresh_from_db()
        assert (second.status, second.attempt_count) == (Status.QUEUED, 0)

        # Sending from another account is not held back by this account's bucket.
        with override_notifications(RATE_LIMITS="sms=1000/s,sms:ACanother=1/m"):
            assert services.notification_deliver(notification_id=second.pk).outcome == "delivered"
    assert [request.reply_status for request in provider_server.requests] == [201, 201]


def test_options_missing_from_settings_take_conf_defaults_and_bad_ones_name_their_variable() -> None:
    with override_settings(NOTIFICATIONS={"RETRY_MAX_ATTEMPTS": 2}):
        config = get_config()
        assert config.default_retry_policy.max_attempts == 2
        assert config.rate_limits["email"].count == 50
        assert config.events.queue == "notifications"
    with (
        override_settings(NOTIFICATIONS={"RETRY_MAX_ATTEMPTS": "lots"}),
        pytest.raises(ImproperlyConfigured, match="RETRY_MAX_ATTEMPTS"),
    ):
        get_config()
    with (
        override_settings(NOTIFICATIONS={"RETRY_MAX_ATEMPTS": 3}),
        pytest.raises(ImproperlyConfigured, match="RETRY_MAX_ATEMPTS"),
    ):
        get_config()
    with override_settings(NOTIFICATIONS={"EVENTS_PREFETCH": 0}), pytest.raises(ImproperlyConfigured, match="EVENTS_PREFETCH"):
        get_config()


def test_while_clients_share_a_channel_a_backlog_holds_only_its_share_so_another_clients_send_waits_little() -> None:
    # webhook=10/s with RATE_LIMIT_HOLD_SECONDS=0.25. Client B has sent (the bucket is shared).
    # Client A, asking for 100 slots again and again (a backlog), is given 0.25 s of the
    # channel's time (3 slots of 0.1 s) and two more slots, then nothing until its slots pass;
    # B's next send waits those 5 slots, not the second (10 slots) A would have booked before.
    # B, sending now and then, is never refused.
    with override_notifications(RATE_LIMITS="webhook=10/s", RATE_LIMIT_HOLD_SECONDS=0.25):
        assert reserve_send_slot("webhook", count=1, holder="2").wait_seconds == 0
        time.sleep(0.11)  # B's slot passes (the limiter's clock is Redis', not one a test can move)
        a = [reserve_send_slot("webhook", count=100, holder="1") for _ in range(4)]
        b = reserve_send_slot("webhook", count=1, holder="2")
        b_again = reserve_send_slot("webhook", count=1, holder="2")
    assert [(r.reserved, r.slots) for r in a] == [(True, 3), (True, 1), (True, 1), (False, 1)]
    assert 0.29 <= a[1].wait_seconds <= 0.31 and 0.39 <= a[2].wait_seconds <= 0.41
    assert 0.2 < a[3].wait_seconds <= 0.26  # back once the booking is within 0.25 s
    assert b.reserved and b.slots == 1 and 0.49 <= b.wait_seconds <= 0.51
    assert b_again.reserved and 0.59 <= b_again.wait_seconds <= 0.61


def test_a_client_alone_on_a_channel_books_ahead_as_before() -> None:
    with override_notifications(RATE_LIMITS="webhook=10/s", RATE_LIMIT_HOLD_SECONDS=0.25):
        alone = reserve_send_slot("webhook", count=100, holder="1")
    assert alone.reserved and alone.slots == 11  # the second ahead a caller accepts
