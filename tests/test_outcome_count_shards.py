"""The dashboard's counters are spread over a few rows each (issue #23): worker threads recording
outcomes at once add to their own rows instead of queueing on one row's lock; the dashboard and
the lists' filters sum the rows. Real PostgreSQL."""

from __future__ import annotations

import threading
from datetime import timedelta

import pytest
from django.db import connection, transaction
from django.utils import timezone

from notifications import selectors
from notifications.models import OutcomeCount, Status, hour_of
from notifications.services.records import outcome_counts

from .factories import make_api_client
from .helpers import wait_until
from .test_admin import make_notification

pytestmark = pytest.mark.django_db(transaction=True)


def test_an_outcome_counted_while_another_threads_count_of_the_same_hour_is_uncommitted_does_not_wait() -> None:
    client, _ = make_api_client()
    notification = make_notification(client)
    holding, release, done = threading.Event(), threading.Event(), threading.Event()
    errors: list[BaseException] = []

    def count(shard: int, *, hold: bool) -> None:
        try:
            outcome_counts._thread.shard = shard  # each thread's row of the counter, as its first outcome picks it
            key = outcome_counts.outcome_key(notification, Status.DELIVERED, delivered_at=timezone.now())
            with transaction.atomic():
                outcome_counts.outcome_counts_add([key])
                if hold:  # a worker thread between its record's statements and its commit
                    holding.set()
                    release.wait(timeout=30)
            if not hold:
                done.set()
        except BaseException as exc:
            errors.append(exc)
        finally:
            connection.close()

    first = threading.Thread(target=count, args=(0,), kwargs={"hold": True})
    first.start()
    try:
        assert holding.wait(timeout=10)
        second = threading.Thread(target=count, args=(1,), kwargs={"hold": False})
        second.start()
        # With one row a counter, the second waited for the first's commit.
        wait_until(done.is_set, timeout=10, message="the second thread's count, while the first holds its own")
    finally:
        release.set()
        first.join(timeout=10)
    second.join(timeout=10)
    assert not errors
    rows = OutcomeCount.objects.filter(status=Status.DELIVERED)
    assert sorted(rows.values_list("shard", "count")) == [(0, 1), (1, 1)]


def test_threads_count_on_different_rows_and_the_dashboard_sums_them() -> None:
    picked: set[int] = set()

    def pick() -> None:
        picked.add(outcome_counts._shard())

    threads = [threading.Thread(target=pick) for _ in range(16)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(picked) > 1  # sixteen threads on one row of eight: one chance in 8**15

    hour = hour_of(timezone.now())
    for shard, count in ((0, 3), (1, 2), (2, -1)):
        OutcomeCount.objects.create(hour=hour, channel="email", status=Status.DELIVERED, count=count, shard=shard)
    assert selectors.dashboard(hours=2).status_counts[Status.DELIVERED] == 4


def test_the_lists_filters_offer_what_the_summed_rows_count_not_a_row_alone() -> None:
    hour = hour_of(timezone.now() - timedelta(hours=1))
    rows = [
        # Failed once on shard 0, then retried and delivered: the retry took it from shard 1.
        ("rejected HTTP 400", "acct-a", 0, 1),
        ("rejected HTTP 400", "acct-a", 1, -1),
        ("permanent SMTP 550", "acct-b", 0, 2),
        ("permanent SMTP 550", "acct-b", 3, -1),
    ]
    for reason, account, shard, count in rows:
        OutcomeCount.objects.create(
            hour=hour, channel="email", account=account, status=Status.FAILED, reason=reason, count=count, shard=shard
        )
    assert selectors.failure_reasons_recent() == ["permanent SMTP 550"]
    assert selectors.provider_accounts_recent() == ["acct-b"]
