"""Quiet hours: a non-critical notification due inside the recipient's window is held to its end
(in UTC, by zoneinfo, right across midnight and DST changes) and the sweeper sends it then."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import dramatiq
import pytest
from django.utils import timezone
from rest_framework.test import APIClient

from notifications import services
from notifications.models import DeliveryAttempt, Notification, Status

from .fakes import LocalSmtpServer, smtp_server_fixture  # noqa: F401  (fixture)

NIGHT = {"start": "22:00", "end": "08:00"}


def utc(text: str) -> datetime:
    return datetime.fromisoformat(text).astimezone(UTC)


@pytest.mark.parametrize(
    ("at", "quiet_hours", "zone", "end"),
    [
        # across midnight: before it, after it, and outside the window on either side
        ("2027-01-14T23:30:00+01:00", NIGHT, "Europe/Berlin", "2027-01-15T08:00:00+01:00"),
        ("2027-01-15T03:00:00+01:00", NIGHT, "Europe/Berlin", "2027-01-15T08:00:00+01:00"),
        ("2027-01-15T08:00:00+01:00", NIGHT, "Europe/Berlin", None),
        ("2027-01-14T21:59:00+01:00", NIGHT, "Europe/Berlin", None),
        # a window within one day
        ("2027-01-15T13:30:00-05:00", {"start": "13:00", "end": "14:00"}, "America/New_York", "2027-01-15T14:00:00-05:00"),
        ("2027-01-15T14:30:00-05:00", {"start": "13:00", "end": "14:00"}, "America/New_York", None),
        # Berlin, last Sunday of March: the night is an hour shorter; 08:00 is now UTC+2
        ("2027-03-27T23:30:00+01:00", NIGHT, "Europe/Berlin", "2027-03-28T08:00:00+02:00"),
        # Berlin, last Sunday of October: the night is an hour longer; 08:00 is UTC+1 again
        ("2027-10-30T23:30:00+02:00", NIGHT, "Europe/Berlin", "2027-10-31T08:00:00+01:00"),
        ("2027-10-31T02:30:00+01:00", NIGHT, "Europe/Berlin", "2027-10-31T08:00:00+01:00"),  # the second 02:30
        # an end in the hour skipped in spring ends the window late, never early
        ("2027-03-28T01:30:00+01:00", {"start": "01:00", "end": "02:30"}, "Europe/Berlin", "2027-03-28T03:30:00+02:00"),
    ],
)
def test_the_window_and_its_end_in_utc(at: str, quiet_hours: dict[str, str], zone: str, end: str | None) -> None:
    found = services.quiet_hours_end(at=utc(at), quiet_hours=quiet_hours, timezone=zone)
    assert found == (utc(end) if end else None)


def put_recipient(api: APIClient, **fields: Any) -> Any:
    return api.put("/api/v1/recipients/u1", {"email": "ann@example.com", **fields}, format="json")


def notify(api: APIClient, **body: Any) -> Notification:
    response = api.post("/api/v1/notifications", {"user_id": "u1", "message": "hello", **body}, format="json")
    assert response.status_code == 202, response.content
    return Notification.objects.get(pk=response.json()["id"])


def window_around_now() -> tuple[dict[str, str], datetime]:
    """Quiet hours in UTC from an hour ago to an hour ahead (to the minute), and their end."""
    now = timezone.now().astimezone(UTC)
    start, end = (
        (now - timedelta(hours=1)).replace(second=0, microsecond=0),
        (now + timedelta(hours=1)).replace(second=0, microsecond=0),
    )
    return {"start": start.strftime("%H:%M"), "end": end.strftime("%H:%M")}, end


@pytest.mark.parametrize(
    ("fields", "field"),
    [
        ({"quiet_hours": NIGHT}, "timezone"),
        ({"quiet_hours": {"start": "22:00"}, "timezone": "Europe/Berlin"}, "quiet_hours.end"),
        ({"quiet_hours": {"start": "25:00", "end": "08:00"}, "timezone": "Europe/Berlin"}, "quiet_hours.start"),
        ({"quiet_hours": {"start": "08:00", "end": "08:00"}, "timezone": "Europe/Berlin"}, "quiet_hours"),
        ({"quiet_hours": NIGHT, "timezone": "Berlin"}, "timezone"),
    ],
)
def test_invalid_quiet_hours_are_400_naming_the_field(api: APIClient, fields: dict[str, Any], field: str) -> None:
    response = put_recipient(api, **fields)
    assert response.status_code == 400, response.content
    assert response.json()["error"]["field"] == field


def test_a_notification_due_inside_quiet_hours_is_held_pending_until_their_end(api: APIClient, broker: dramatiq.Broker) -> None:
    quiet_hours, end = window_around_now()
    assert put_recipient(api, timezone="UTC", quiet_hours=quiet_hours).json()["quiet_hours"] == quiet_hours

    notification = notify(api)

    assert (notification.status, notification.enqueued_at, notification.next_attempt_at) == (Status.ACCEPTED, None, end)
    assert api.get(f"/api/v1/notifications/{notification.pk}").json()["scheduled_for"] == end.isoformat().replace("+00:00", "Z")
    assert services.notification_sweep().total == 0  # nothing is due before the end


def test_a_critical_notification_ignores_quiet_hours(api: APIClient) -> None:
    quiet_hours, _ = window_around_now()
    put_recipient(api, timezone="UTC", quiet_hours=quiet_hours)
    api.put("/api/v1/categories/security", {"critical": True}, format="json")

    notification = notify(api, category="security")

    assert notification.status == Status.QUEUED
    assert notification.next_attempt_at is not None and notification.next_attempt_at <= timezone.now()


@pytest.mark.parametrize(
    ("send_at", "scheduled_for"),
    [
        ("2027-03-27T23:30:00+01:00", "2027-03-28T06:00:00Z"),  # spring forward: 08:00 CEST
        ("2027-03-28T03:30:00+02:00", "2027-03-28T06:00:00Z"),  # after midnight, after the change
        ("2027-10-30T23:30:00+02:00", "2027-10-31T07:00:00Z"),  # fall back: 08:00 CET
        ("2027-10-31T12:00:00+01:00", "2027-10-31T11:00:00Z"),  # outside the window: send_at as asked
    ],
)
def test_send_at_inside_quiet_hours_moves_to_their_end_across_the_berlin_dst_changes(
    api: APIClient, send_at: str, scheduled_for: str
) -> None:
    put_recipient(api, timezone="Europe/Berlin", quiet_hours=NIGHT)

    notification = notify(api, send_at=send_at)

    read = api.get(f"/api/v1/notifications/{notification.pk}").json()
    assert (read["status"], read["scheduled_for"]) == ("accepted", scheduled_for)
    assert utc(read["send_at"].replace("Z", "+00:00")) == utc(send_at)  # what the client asked for stays


def test_a_send_that_falls_into_quiet_hours_after_accept_is_held_at_the_claim_without_an_attempt(
    api: APIClient, smtp_server: LocalSmtpServer
) -> None:
    put_recipient(api)
    notification = notify(api)
    assert notification.status == Status.QUEUED
    quiet_hours, end = window_around_now()
    put_recipient(api, timezone="UTC", quiet_hours=quiet_hours)

    outcome = services.notification_deliver(notification_id=notification.pk)

    notification.refresh_from_db()
    assert outcome.outcome == "held"
    # Back to accepted with no message out, so the sweeper picks it up at the end.
    assert (notification.status, notification.next_attempt_at, notification.enqueued_at) == (Status.ACCEPTED, end, None)
    assert not DeliveryAttempt.objects.exists() and smtp_server.received == []


def test_the_sweeper_sends_a_held_notification_at_the_end_of_quiet_hours(
    api: APIClient, broker: dramatiq.Broker, smtp_server: LocalSmtpServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    quiet_hours, end = window_around_now()
    put_recipient(api, timezone="UTC", quiet_hours=quiet_hours)
    notification = notify(api)
    assert services.notification_sweep().enqueued == 0

    # The clock at the window's end (plus the sweeper's grace), rather than an hour's wait.
    monkeypatch.setattr(timezone, "now", lambda: end + timedelta(seconds=3))
    report = services.notification_sweep()
    outcome = services.notification_deliver(notification_id=notification.pk)

    assert report.enqueued == 1
    assert outcome.outcome == "delivered"
    assert [mail.rcpt_tos for mail in smtp_server.received] == [["ann@example.com"]]
