"""The admin dashboard: its counters equal the notifications the services delivered, failed and
made dead; a retry moves a notification out of its count; each figure links to the list it counts."""

from __future__ import annotations

import html
import io
import re
from collections import Counter
from datetime import timedelta
from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.db import connection
from django.db.models import Count, Sum
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from notifications import selectors, services
from notifications.models import DeadLetter, Notification, OutcomeCount, Status, hour_of

from .factories import accept_notification, make_api_client
from .fakes import LocalSmtpServer, override_notifications, smtp_server_fixture  # noqa: F401  (fixture)
from .test_admin import make_notification, support_group

pytestmark = pytest.mark.django_db

COUNTED = (Status.DELIVERED, Status.FAILED, Status.DEAD)


@pytest.fixture
def support(db: None) -> Client:
    user = get_user_model().objects.create_user("sam", password="support-pass-1", is_staff=True)
    user.groups.add(support_group())
    client = Client()
    client.force_login(user)
    return client


def counters() -> dict[tuple[str, str], int]:
    """The counters summed by (channel, status), zeros left out."""
    rows = OutcomeCount.objects.values("channel", "status").annotate(n=Sum("count"))
    return {(row["channel"], row["status"]): row["n"] for row in rows if row["n"]}


def stored() -> dict[tuple[str, str], int]:
    """The notifications delivered, failed or dead, counted one by one."""
    rows = Notification.objects.filter(status__in=COUNTED).values("channel", "status").annotate(n=Count("pk"))
    return {(row["channel"], row["status"]): row["n"] for row in rows}


def counter_rows() -> set[tuple[Any, ...]]:
    return set(
        OutcomeCount.objects.exclude(count=0).values_list(
            "hour", "channel", "account", "status", "reason", "latency_le_ms", "count"
        )
    )


def make_outcomes(smtp_server: LocalSmtpServer, *, delivered: int, failed: int, dead: int) -> dict[str, list[Notification]]:
    """Notifications accepted and sent by the services: to addresses the SMTP server takes,
    refuses for good (550: failed) and refuses for now (451: dead, with one attempt allowed)."""
    client, _ = make_api_client("shop")
    made: dict[str, list[Notification]] = {"delivered": [], "failed": [], "dead": []}
    for status, count in (("delivered", delivered), ("failed", failed), ("dead", dead)):
        for index in range(count):
            address = f"{status}-{index}@example.com"
            if status == "failed":
                smtp_server.refuse(address)
            elif status == "dead":
                smtp_server.defer(address)
            made[status].append(accept_notification(client, to=address, user_id=f"{status}-{index}"))
    with override_notifications(RETRY_MAX_ATTEMPTS=1):
        services.notifications_deliver(notification_ids=[n.pk for group in made.values() for n in group])
    for status, group in made.items():
        for notification in group:
            notification.refresh_from_db()
            assert notification.status == status, (notification.status, notification.last_error)
    return made


def test_the_counters_equal_what_the_services_delivered_failed_and_made_dead(smtp_server: LocalSmtpServer) -> None:
    made = make_outcomes(smtp_server, delivered=3, failed=2, dead=1)

    assert counters() == stored() == {("email", "delivered"): 3, ("email", "failed"): 2, ("email", "dead"): 1}
    reasons = dict(OutcomeCount.objects.filter(status__in=["failed", "dead"]).values_list("status", "reason"))
    assert reasons == {"failed": "permanent SMTP 550", "dead": "transient SMTP 451"}
    assert {n.failure_reason for n in Notification.objects.filter(pk__in=[n.pk for n in made["failed"]])} == {
        "permanent SMTP 550"
    }
    # Counted again from the notifications, the counters come out the same.
    kept = counter_rows()
    assert services.outcome_counts_rebuild(since=timezone.now() - timedelta(hours=2)) == 6
    assert counter_rows() == kept


def test_a_retried_dead_notification_leaves_the_dead_count_and_is_counted_where_it_ends_next(
    smtp_server: LocalSmtpServer,
) -> None:
    made = make_outcomes(smtp_server, delivered=1, failed=0, dead=1)
    [dead] = made["dead"]
    assert counters()[("email", "dead")] == 1

    assert services.dead_letter_redrive(dead_letter=DeadLetter.objects.get(notification=dead), by=None).done
    assert ("email", "dead") not in counters()
    assert Notification.objects.get(pk=dead.pk).failure_reason == ""

    smtp_server.defer(dead.address, until_further_notice=False)
    assert services.notification_deliver(notification_id=dead.pk).outcome == "delivered"
    assert counters() == stored() == {("email", "delivered"): 2}


def test_a_delivery_is_counted_in_the_hour_it_was_accepted_and_the_bucket_of_its_latency(smtp_server: LocalSmtpServer) -> None:
    client, _ = make_api_client()
    now = timezone.now()
    recent = accept_notification(client, to="ann@example.com", user_id="recent")
    older = accept_notification(client, to="bob@example.com", user_id="older")
    Notification.objects.filter(pk=recent.pk).update(created_at=now - timedelta(seconds=3))
    Notification.objects.filter(pk=older.pk).update(created_at=now - timedelta(hours=2, minutes=30))

    services.notifications_deliver(notification_ids=[recent.pk, older.pk])

    counted = set(OutcomeCount.objects.values_list("hour", "status", "latency_le_ms", "count"))
    assert counted == {
        (hour_of(now - timedelta(seconds=3)), "delivered", 5_000, 1),  # 3 s: within 5 s
        (hour_of(now - timedelta(hours=2, minutes=30)), "delivered", 14_400_000, 1),  # 2.5 h: within 4 h
    }
    board = selectors.dashboard(hours=24)
    assert (board.latency.total, board.latency.percentile(0.5), board.latency.percentile(0.95)) == (2, 5_000, 14_400_000)
    # The last hour alone: the recent one only (unless it was accepted in the hour before).
    same_hour = hour_of(now - timedelta(seconds=3)) == hour_of(now)
    assert selectors.dashboard(hours=1, now=now).latency.buckets == ([(5_000, 1)] if same_hour else [])


def test_the_rebuild_command_counts_the_notifications_stored_before_the_counters(support: Client) -> None:
    client, _ = make_api_client()
    for status in (Status.DELIVERED, Status.DELIVERED, Status.FAILED, Status.QUEUED):
        make_notification(client, status=status, delivered_at=timezone.now())
    old = make_notification(client, status=Status.DEAD)
    Notification.objects.filter(pk=old.pk).update(created_at=timezone.now() - timedelta(days=9))

    out = io.StringIO()
    call_command("outcome_counts_rebuild", "--days", "7", stdout=out)
    assert "counted 3 delivered, failed or dead notifications of the last 7 days" in out.getvalue()

    assert counters() == {("email", "delivered"): 2, ("email", "failed"): 1}
    page = support.get("/admin/").content.decode()
    assert re.search(r'data-status="delivered">2<', page) and re.search(r'data-status="queued">1<', page)


def dashboard_links(page: str) -> list[tuple[str, str]]:
    """Every bar's link and label in the page's SVG charts."""
    bars = re.findall(r'<a href="([^"]+)"><title>([^<]+)</title><rect', page)
    return [(html.unescape(href), html.unescape(label)) for href, label in bars]


def listed(browser: Client, href: str) -> int:
    """How many rows the list at ``href`` has (a filter the admin refuses redirects with ?e=1)."""
    response = browser.get(href)
    assert response.status_code == 200, (href, response.status_code)
    return int(response.context["cl"].result_count)


def test_every_bar_of_the_dashboard_links_to_a_list_of_as_many_notifications_as_it_counts(
    smtp_server: LocalSmtpServer, support: Client
) -> None:
    make_outcomes(smtp_server, delivered=4, failed=2, dead=1)

    for window in ("24h", "7d"):
        page = support.get(f"/admin/?window={window}").content.decode()
        links = dashboard_links(page)
        by_hour = [(href, label) for href, label in links if label.startswith("email 2")]
        assert Counter(label.rsplit(" ", 1)[1] for _, label in by_hour) == {"delivered": 1, "failed": 1, "dead": 1}
        for href, label in links:
            if "delivered within" in label:
                continue  # the histogram's bars all lead to the window's deliveries, checked below
            count = int(re.search(r"(\d+) (delivered|failed|dead|failed or dead)$", label).group(1))
            assert listed(support, href) == count, (window, label, href)
        assert 'aria-label="email, by hour: 4 delivered, 2 failed, 1 dead"' in page
        assert "email · (only account): 57.1% delivered of 7" in html.unescape(page)
        assert "permanent SMTP 550 (email): 2" in html.unescape(page)
        legend = re.findall(r'class="legend legend-(\w+)" href="([^"]+)">\w+ <span class="legend-count">(\d+)<', page)
        assert [(status, int(count)) for status, _, count in legend] == [("delivered", 4), ("failed", 2), ("dead", 1)]
        assert all(listed(support, html.unescape(href)) == int(count) for _, href, count in legend)
        assert page.count('class="chart chart-hours"') == 1 and page.count("<rect") >= 3
    delivered_link = re.search(r'<a href="([^"]+)">p50', page)
    assert delivered_link and listed(support, html.unescape(delivered_link.group(1))) == 4


def test_the_dashboard_reads_a_bounded_number_of_queries_whatever_the_rows(smtp_server: LocalSmtpServer, support: Client) -> None:
    make_outcomes(smtp_server, delivered=1, failed=1, dead=1)
    with CaptureQueriesContext(connection) as few:
        support.get("/admin/?window=7d")
    client = make_api_client("more")[0]
    for status in (Status.QUEUED, Status.CANCELLED) * 5:
        make_notification(client, status=status)
    with CaptureQueriesContext(connection) as many:
        page = support.get("/admin/?window=7d").content.decode()
    assert len(many.captured_queries) == len(few.captured_queries)
    assert re.search(r'data-status="cancelled">5<', page)


def test_the_purge_deletes_the_counters_of_the_hours_it_purges() -> None:
    now = timezone.now()
    for age in (timedelta(days=31), timedelta(days=29)):
        OutcomeCount.objects.create(hour=hour_of(now - age), channel="email", status=Status.DELIVERED, count=5)

    report = services.notification_purge(older_than=timedelta(days=30), now=now)

    assert report.outcome_counts == 1
    assert list(OutcomeCount.objects.values_list("hour", flat=True)) == [hour_of(now - timedelta(days=29))]
