"""The support admin: find, inspect, retry and discard, with roles, an audit trail and retention."""

from __future__ import annotations

import importlib
import io
import json
import re
import uuid
from datetime import timedelta
from typing import Any

import pytest
from django.contrib.admin.models import CHANGE, LogEntry
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group, Permission
from django.contrib.contenttypes.models import ContentType
from django.core.management import call_command
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.utils import timezone
from django.utils.html import escape

from notifications import services
from notifications.models import (
    ApiClient,
    AttemptOutcome,
    Category,
    DeadLetter,
    DeadLetterReason,
    DeadLetterSource,
    DeliveryAttempt,
    IdempotencyKey,
    Notification,
    Resolution,
    Status,
    hash_token,
)

from .factories import accept_notification, make_api_client
from .fakes import LocalSmtpServer, smtp_server_fixture  # noqa: F401  (fixture)
from .helpers import wait_until

User = get_user_model()
SUPPORT_MIGRATION = importlib.import_module("notifications.migrations.0003_support_group")
FEEDBACK_MIGRATION = importlib.import_module("notifications.migrations.0008_provider_feedback")  # suppressions
TEST_MODE_MIGRATION = importlib.import_module("notifications.migrations.0018_webhooks_testmode")  # captured messages
DLQ_URL = "/admin/notifications/deadletter/"
NOTIFICATIONS_URL = "/admin/notifications/notification/"


# --- Fixtures ------------------------------------------------------------------------------------


def support_group() -> Group:
    group, created = Group.objects.get_or_create(name="support")
    if created:  # a transactional test's flush removed the migration's rows; put them back the same way
        for model, codename in SUPPORT_MIGRATION.SUPPORT_PERMISSIONS:
            group.permissions.add(
                Permission.objects.get(content_type__app_label="notifications", content_type__model=model, codename=codename)
            )
    return group


@pytest.fixture
def support_user(db: None) -> Any:
    user = User.objects.create_user("sam", password="support-pass-1", is_staff=True)
    user.groups.add(support_group())
    return user


@pytest.fixture
def support(support_user: Any) -> Client:
    client = Client()
    client.force_login(support_user)
    return client


@pytest.fixture
def outsider(db: None) -> Client:
    """Staff, so the admin lets them in, but not in the support group."""
    user = User.objects.create_user("olly", password="outsider-pass-1", is_staff=True)
    client = Client()
    client.force_login(user)
    return client


@pytest.fixture
def superuser(db: None) -> Client:
    user = User.objects.create_superuser("root", password="root-pass-1")
    client = Client()
    client.force_login(user)
    return client


def make_notification(client: ApiClient, **fields: Any) -> Notification:
    values: dict[str, Any] = {
        "client": client,
        "user_id": "u1",
        "channel": "email",
        "address": f"user-{uuid.uuid4().hex[:8]}@example.com",
        "subject": "Your order",
        "message": "It shipped.",
        "status": Status.DELIVERED,
    }
    values.update(fields)
    return Notification.objects.create(**values)


def make_dead_letter(client: ApiClient, *, status: str = Status.FAILED, **fields: Any) -> DeadLetter:
    notification = make_notification(client, status=status, attempt_count=1, last_error="550 no such user")
    values: dict[str, Any] = {
        "notification": notification,
        "channel": notification.channel,
        "reason": DeadLetterReason.PERMANENT_FAILURE,
        "last_error": "550 5.1.1 no such user",
        "attempts": 1,
    }
    values.update(fields)
    return DeadLetter.objects.create(**values)


def csrf_post(browser: Client, page: str, url: str, data: dict[str, Any] | None = None) -> Any:
    """POST as a browser does: the CSRF token from the page's form, checks enforced."""
    response = browser.get(page)
    assert response.status_code == 200, response.status_code
    token = re.search(rb'name="csrfmiddlewaretoken" value="([^"]+)"', response.content)
    assert token is not None, "the page has no CSRF token"
    return browser.post(url, {"csrfmiddlewaretoken": token.group(1).decode(), **(data or {})}, follow=True)


def enforcing_csrf(user: Any) -> Client:
    client = Client(enforce_csrf_checks=True)
    client.force_login(user)
    return client


def messages_of(response: Any) -> list[str]:
    return [str(message) for message in response.context["messages"]]


def audit_entries(obj: Any) -> list[LogEntry]:
    return list(
        LogEntry.objects.filter(content_type=ContentType.objects.get_for_model(obj), object_id=str(obj.pk)).order_by("pk")
    )


# --- Roles ---------------------------------------------------------------------------------------


@pytest.mark.django_db
def test_the_migration_gives_the_support_group_view_and_retry_permissions_only() -> None:
    group = Group.objects.get(name="support")
    codenames = set(group.permissions.values_list("codename", flat=True))
    assert codenames == {
        "view_notification",
        "view_deliveryattempt",
        "view_deadletter",
        "retry_deadletter",
        "view_recipient",
        # Migration 0008: the suppression list, whose entries support staff may remove.
        "view_suppression",
        "delete_suppression",
        # Migration 0018: test mode's captured messages.
        "view_capturedmessage",
        # Migration 0019: a recipient's in-app inbox.
        "view_inboxitem",
    }


def test_support_may_not_add_change_or_delete_notifications_nor_manage_users(support: Client, support_user: Any) -> None:
    api_client, _ = make_api_client()
    notification = make_notification(api_client)
    dead_letter = make_dead_letter(api_client)

    assert support.get(f"{NOTIFICATIONS_URL}add/").status_code == 403
    assert support.get(f"{NOTIFICATIONS_URL}{notification.pk}/delete/").status_code == 403
    assert support.post(f"{NOTIFICATIONS_URL}{notification.pk}/change/", {"message": "edited"}).status_code == 403
    assert support.get(f"{DLQ_URL}{dead_letter.pk}/delete/").status_code == 403
    assert support.get("/admin/auth/user/").status_code == 403
    assert support.get(f"/admin/auth/user/{support_user.pk}/change/").status_code == 403
    assert support.get("/admin/auth/group/").status_code == 403
    assert support.get("/admin/notifications/apiclient/").status_code == 403
    notification.refresh_from_db()
    assert notification.message == "It shipped."


def test_a_staff_user_without_the_support_group_is_refused_everything(outsider: Client) -> None:
    api_client, _ = make_api_client()
    notification = make_notification(api_client)
    dead_letter = make_dead_letter(api_client)

    assert outsider.get(NOTIFICATIONS_URL).status_code == 403
    assert outsider.get(f"{NOTIFICATIONS_URL}{notification.pk}/change/").status_code == 403
    assert outsider.get(DLQ_URL).status_code == 403
    assert outsider.get(f"{DLQ_URL}{dead_letter.pk}/change/").status_code == 403
    assert outsider.post(f"{DLQ_URL}{dead_letter.pk}/retry/").status_code == 403
    assert outsider.post(f"{DLQ_URL}{dead_letter.pk}/discard/", {"confirm": "yes"}).status_code == 403
    dead_letter.refresh_from_db()
    assert dead_letter.resolution == Resolution.UNRESOLVED
    index = outsider.get("/admin/")
    assert b"system-health" not in index.content and b"Dead letters" not in index.content


def test_a_user_who_is_not_staff_is_sent_to_the_login_page(db: None) -> None:
    user = User.objects.create_user("nina", password="nina-pass-1")
    user.groups.add(support_group())
    browser = Client()
    browser.force_login(user)
    response = browser.get(DLQ_URL)
    assert response.status_code == 302 and "/admin/login/" in response["Location"]


def test_a_viewer_without_retry_permission_sees_no_retry_button_and_cannot_post_one(db: None) -> None:
    user = User.objects.create_user("vera", password="vera-pass-1", is_staff=True)
    user.user_permissions.add(Permission.objects.get(codename="view_deadletter"))
    viewer = Client()
    viewer.force_login(user)
    dead_letter = make_dead_letter(make_api_client()[0])

    listing = viewer.get(DLQ_URL)
    detail = viewer.get(f"{DLQ_URL}{dead_letter.pk}/change/")

    assert listing.status_code == 200 and detail.status_code == 200
    assert b"retry-button" not in listing.content and b"retry-button" not in detail.content
    assert b"Retry selected" not in listing.content
    assert viewer.post(f"{DLQ_URL}{dead_letter.pk}/retry/").status_code == 403
    assert DeadLetter.objects.get(pk=dead_letter.pk).resolution == Resolution.UNRESOLVED


# --- Finding and inspecting notifications --------------------------------------------------------


def test_support_sees_the_notification_list_with_short_id_user_channel_category_status_last_error_and_created(
    support: Client,
) -> None:
    api_client, _ = make_api_client("shop")
    category = Category.objects.create(client=api_client, key="orders")
    delivered = make_notification(api_client, user_id="ann", category=category, attempt_count=1)
    failed = make_notification(
        api_client, user_id="bob", status=Status.FAILED, channel="sms", last_error="21211 The 'To' number is not valid " * 5
    )

    response = support.get(NOTIFICATIONS_URL)

    assert response.status_code == 200
    rows = {str(n.pk) for n in response.context["cl"].result_list}
    assert rows == {str(delivered.pk), str(failed.pk)}
    page = response.content.decode()
    header = re.findall(r'<th scope="col" class="[^"]*column-(\w+)', page)
    assert header == ["short_id", "user", "channel", "category", "status", "last_error_short", "created"]
    for text in ("ann", "bob", "orders", "delivered", "failed", "sms", str(failed.pk)[:8]):
        assert text in page
    assert escape(failed.last_error[:60]) + "…" in page  # cut short
    assert timezone.localtime(failed.created_at).strftime("%Y-%m-%d %H:%M:%S") in page


def test_the_notification_list_filters_by_client_channel_category_status_and_provider_status(support: Client) -> None:
    shop, _ = make_api_client("shop")
    category = Category.objects.create(client=shop, key="orders")
    wanted = make_notification(shop, channel="sms", category=category, status=Status.DELIVERED, provider_status="delivered")
    make_notification(shop, channel="sms", status=Status.DELIVERED)
    make_notification(make_api_client("bank")[0], channel="sms", category=category, status=Status.DELIVERED)

    response = support.get(
        NOTIFICATIONS_URL,
        {
            "client__id__exact": shop.pk,
            "channel__exact": "sms",
            "category__id__exact": category.pk,
            "status__exact": "delivered",
            "provider_status__exact": "delivered",
        },
    )

    assert [n.pk for n in response.context["cl"].result_list] == [wanted.pk]


@pytest.mark.parametrize("field", ["id", "address", "idempotency_key", "trace_id"])
def test_search_finds_a_notification_by_id_address_idempotency_key_and_trace_id(support: Client, field: str) -> None:
    api_client, _ = make_api_client()
    wanted = make_notification(api_client, address="wanted@example.com", idempotency_key="order-42", trace_id="ab" * 16)
    make_notification(api_client, address="other@example.com", idempotency_key="order-43", trace_id="cd" * 16)
    term = {"id": str(wanted.pk), "address": "wanted@example.com", "idempotency_key": "order-42", "trace_id": "ab" * 16}[field]

    response = support.get(NOTIFICATIONS_URL, {"q": term})

    assert [n.pk for n in response.context["cl"].result_list] == [wanted.pk]


def test_search_for_something_unknown_finds_nothing(support: Client) -> None:
    make_notification(make_api_client()[0])
    response = support.get(NOTIFICATIONS_URL, {"q": "nobody@example.com"})
    assert list(response.context["cl"].result_list) == []


def test_filters_by_status_channel_client_and_created_date(support: Client) -> None:
    shop, _ = make_api_client("shop")
    bank, _ = make_api_client("bank")
    old = make_notification(shop, status=Status.DELIVERED, channel="email")
    old.created_at = timezone.now() - timedelta(days=40)
    old.save(update_fields=["created_at"])
    sms_dead = make_notification(shop, status=Status.DEAD, channel="sms")
    bank_delivered = make_notification(bank, status=Status.DELIVERED, channel="email")

    def found(**params: Any) -> set[Any]:
        response = support.get(NOTIFICATIONS_URL, params)
        assert response.status_code == 200
        return {n.pk for n in response.context["cl"].result_list}

    assert found(status__exact="dead") == {sms_dead.pk}
    assert found(channel__exact="email") == {old.pk, bank_delivered.pk}
    assert found(client__id__exact=bank.pk) == {bank_delivered.pk}
    since = (timezone.now() - timedelta(days=7)).isoformat()
    assert found(created_at__gte=since) == {sms_dead.pk, bank_delivered.pk}


def test_the_detail_page_shows_message_metadata_attempts_and_trace_id_with_nothing_editable(support: Client) -> None:
    api_client, _ = make_api_client()
    notification = make_notification(
        api_client,
        subject="Parcel on its way",
        message="Order <42> shipped\nsecond line",
        metadata={"order_id": 42, "tier": "gold"},
        trace_id="0af7651916cd43dd8448eb211c80319c",
        status=Status.DELIVERED,
        attempt_count=2,
    )
    DeliveryAttempt.objects.create(
        notification=notification, number=1, outcome=AttemptOutcome.TRANSIENT_ERROR, error_message="451 mailbox busy"
    )
    DeliveryAttempt.objects.create(notification=notification, number=2, outcome=AttemptOutcome.DELIVERED)

    response = support.get(f"{NOTIFICATIONS_URL}{notification.pk}/change/")

    assert response.status_code == 200
    page = response.content.decode()
    assert "Parcel on its way" in page
    assert "Order &lt;42&gt; shipped\nsecond line" in page  # rendered as text, escaped
    assert "&quot;order_id&quot;: 42" in page
    assert "0af7651916cd43dd8448eb211c80319c" in page
    assert "451 mailbox busy" in page and "transient_error" in page
    # Read-only: no form inputs for the notification's fields or its attempts, no save button.
    assert not re.search(
        r'name="(message|subject|address|status|metadata|attempts-\d+-(number|outcome|error_class|error_message|provider_response))"',
        page,
    )
    assert 'name="_save"' not in page and "deletelink" not in page


def test_the_detail_page_shows_each_attempts_channel_account_outcome_error_and_time_and_the_route(support: Client) -> None:
    api_client, _ = make_api_client()
    notification = make_notification(
        api_client,
        channel="email",
        status=Status.DELIVERED,
        attempt_count=2,
        route=[
            {"channel": "sms", "outcome": "failed", "reason": "permanent_error", "attempts": 1},
            {"channel": "email", "outcome": "delivered", "reason": ""},
        ],
    )
    started = timezone.now().replace(microsecond=0)
    DeliveryAttempt.objects.create(
        notification=notification,
        number=1,
        channel="sms",
        account="AC-main",
        outcome=AttemptOutcome.PERMANENT_ERROR,
        error_class="notifications.errors.PermanentChannelError",
        error_message="the sms channel is not configured: set TWILIO_ACCOUNT_SID",
        started_at=started,
    )
    DeliveryAttempt.objects.create(
        notification=notification, number=2, channel="email", outcome=AttemptOutcome.DELIVERED, started_at=started
    )

    page = support.get(f"{NOTIFICATIONS_URL}{notification.pk}/change/").content.decode()

    inline = page[page.index('id="attempts-group"') :]
    columns = re.findall(r'<th class="column-(\w+)', inline)
    assert columns[:7] == ["number", "channel", "account", "outcome", "started", "duration_ms", "error"]
    assert "AC-main" in inline
    assert "<strong>PermanentChannelError</strong>: the sms channel is not configured" in inline
    assert timezone.localtime(started).strftime("%Y-%m-%d %H:%M:%S") in inline
    assert "<li><strong>sms</strong>: failed (permanent_error), 1 attempt</li>" in page
    assert "<li><strong>email</strong>: delivered</li>" in page
    assert re.search(r"field-attempts_made.*?<div class=\"readonly\">2</div>", page, re.S)


def test_a_failed_notifications_page_has_retry_and_a_pending_ones_cancel_and_a_viewer_neither(
    support_user: Any, db: None
) -> None:
    api_client, _ = make_api_client()
    dead_letter = make_dead_letter(api_client)
    pending = make_notification(api_client, status=Status.QUEUED)
    browser = enforcing_csrf(support_user)

    failed_page = browser.get(f"{NOTIFICATIONS_URL}{dead_letter.notification_id}/change/").content
    pending_page = browser.get(f"{NOTIFICATIONS_URL}{pending.pk}/change/").content
    assert b"retry-button" in failed_page and b"cancel-button" not in failed_page
    assert b"cancel-button" in pending_page and b"retry-button" not in pending_page

    viewer_user = User.objects.create_user("vera", password="vera-pass-1", is_staff=True)
    viewer_user.user_permissions.add(Permission.objects.get(codename="view_notification"))
    viewer = Client()
    viewer.force_login(viewer_user)
    assert b"retry-button" not in viewer.get(f"{NOTIFICATIONS_URL}{dead_letter.notification_id}/change/").content
    assert viewer.post(f"{NOTIFICATIONS_URL}{dead_letter.notification_id}/retry/").status_code == 403
    assert DeadLetter.objects.get(pk=dead_letter.pk).resolution == Resolution.UNRESOLVED


def test_the_attempt_list_and_recipients_are_readable_but_not_editable(support: Client) -> None:
    api_client, _ = make_api_client()
    notification = make_notification(api_client)
    attempt = DeliveryAttempt.objects.create(notification=notification, number=1, outcome=AttemptOutcome.DELIVERED)

    assert support.get("/admin/notifications/deliveryattempt/").status_code == 200
    assert support.get("/admin/notifications/recipient/").status_code == 200
    assert support.post(f"/admin/notifications/deliveryattempt/{attempt.pk}/change/", {"outcome": "x"}).status_code == 403


def test_the_admin_index_shows_status_counts_of_the_last_24_hours_and_the_unresolved_dlq_size(support: Client) -> None:
    api_client, _ = make_api_client()
    for _ in range(3):
        make_notification(api_client, status=Status.DELIVERED)
    stale = make_notification(api_client, status=Status.DELIVERED)
    stale.created_at = timezone.now() - timedelta(hours=30)
    stale.save(update_fields=["created_at"])
    make_dead_letter(api_client)
    make_dead_letter(api_client)
    make_dead_letter(api_client, resolution=Resolution.DISCARDED)
    # Made by hand, not by the services that count outcomes as they record them: counted now.
    services.outcome_counts_rebuild(since=timezone.now() - timedelta(days=2))

    page = support.get("/admin/").content.decode()

    assert re.search(r'data-status="delivered">3<', page)
    assert re.search(r'data-status="failed">3<', page)
    assert re.search(r'data-status="queued">0<', page)
    assert re.search(r'id="unresolved-dead-letters"><strong>2<', page)


# --- Large tables --------------------------------------------------------------------------------


def changelist_queries(browser: Client, url: str) -> int:
    with CaptureQueriesContext(connection) as queries:
        response = browser.get(url)
    assert response.status_code == 200
    return len(queries.captured_queries)


def test_the_changelist_query_counts_do_not_grow_with_rows(support: Client) -> None:
    clients = [make_api_client()[0] for _ in range(3)]

    def add_rows(count: int) -> None:
        for i in range(count):
            make_dead_letter(clients[i % 3], resolved_by=None)

    add_rows(3)
    few = {url: changelist_queries(support, url) for url in (NOTIFICATIONS_URL, DLQ_URL, "/admin/notifications/deliveryattempt/")}
    add_rows(27)
    for notification in Notification.objects.all():
        DeliveryAttempt.objects.create(notification=notification, number=1, outcome=AttemptOutcome.PERMANENT_ERROR)
    many = {url: changelist_queries(support, url) for url in few}

    assert Notification.objects.count() == 30
    assert many == few


# --- The dead letter queue -----------------------------------------------------------------------


def test_the_dlq_list_shows_reason_error_attempts_age_resolution_and_a_retry_button_on_unresolved_rows(
    support: Client,
) -> None:
    api_client, _ = make_api_client()
    open_letter = make_dead_letter(api_client, last_error="550 5.1.1 mailbox unavailable", attempts=3)
    done_letter = make_dead_letter(api_client, resolution=Resolution.DISCARDED, resolved_at=timezone.now())

    response = support.get(DLQ_URL)

    page = response.content.decode()
    assert "550 5.1.1 mailbox unavailable" in page and "Permanent Failure" in page
    assert f'formaction="/admin/notifications/deadletter/{open_letter.pk}/retry/?next=list"' in page
    assert f"/admin/notifications/deadletter/{done_letter.pk}/retry/" not in page
    assert "Discarded by a command" in page
    assert 'name="csrfmiddlewaretoken"' in page  # the changelist form the buttons submit


def test_the_dlq_filters_by_resolution_channel_and_reason_and_searches_by_address(support: Client) -> None:
    api_client, _ = make_api_client()
    open_email = make_dead_letter(api_client)
    resolved = make_dead_letter(api_client, resolution=Resolution.RETRIED)
    exhausted_sms = make_dead_letter(api_client, channel="sms", reason=DeadLetterReason.RETRIES_EXHAUSTED)

    def found(**params: Any) -> set[int]:
        return {dl.pk for dl in support.get(DLQ_URL, params).context["cl"].result_list}

    assert found(resolved="no") == {open_email.pk, exhausted_sms.pk}
    assert found(resolved="yes") == {resolved.pk}
    assert found(channel="sms") == {exhausted_sms.pk}
    assert found(reason__exact="retries_exhausted") == {exhausted_sms.pk}
    assert found(q=open_email.notification.address) == {open_email.pk}
    assert found(q=str(exhausted_sms.notification_id)) == {exhausted_sms.pk}


def test_an_event_dead_letter_shows_its_raw_body_readably(support: Client) -> None:
    dead_letter = DeadLetter.objects.create(
        source=DeadLetterSource.EVENT,
        reason=DeadLetterReason.POISON_MESSAGE,
        routing_key="order.created",
        raw_body='{"order_id": 42, "email": "ann@example.com"}',
        headers={"x-death": [{"count": 3}]},
        last_error="missing field 'user_id'",
    )

    page = support.get(f"{DLQ_URL}{dead_letter.pk}/change/").content.decode()

    assert "order.created" in page
    assert "&quot;email&quot;: &quot;ann@example.com&quot;,\n  &quot;order_id&quot;: 42" in page  # pretty, a key a line
    assert "&quot;x-death&quot;" in page
    assert "retry-button" in page


def test_retry_is_a_post_with_csrf(support_user: Any) -> None:
    dead_letter = make_dead_letter(make_api_client()[0])
    browser = enforcing_csrf(support_user)

    assert browser.get(f"{DLQ_URL}{dead_letter.pk}/retry/").status_code == 405
    assert browser.post(f"{DLQ_URL}{dead_letter.pk}/retry/").status_code == 403  # no CSRF token
    assert DeadLetter.objects.get(pk=dead_letter.pk).resolution == Resolution.UNRESOLVED


def test_retrying_a_delivered_notifications_dead_letter_says_so_and_changes_nothing(support_user: Any) -> None:
    dead_letter = make_dead_letter(make_api_client()[0], status=Status.DELIVERED)
    browser = enforcing_csrf(support_user)

    response = csrf_post(browser, DLQ_URL, f"{DLQ_URL}{dead_letter.pk}/retry/?next=list")

    assert messages_of(response) == [
        f"0 retried, 1 skipped: #{dead_letter.pk} skipped (its notification is delivered, not failed or dead)"
    ]
    dead_letter.refresh_from_db()
    assert dead_letter.resolution == Resolution.UNRESOLVED
    assert audit_entries(dead_letter) == []


def test_bulk_discard_asks_for_confirmation_then_discards_records_who_and_logs_it(support_user: Any) -> None:
    api_client, _ = make_api_client()
    first, second = make_dead_letter(api_client), make_dead_letter(api_client)
    already = make_dead_letter(api_client, resolution=Resolution.RETRIED)
    browser = enforcing_csrf(support_user)
    selected = {"action": "discard_selected", "_selected_action": [first.pk, second.pk, already.pk]}

    confirmation = csrf_post(browser, DLQ_URL, DLQ_URL, {**selected, "index": "0"})

    assert b"Discard these 3 dead letters?" in confirmation.content
    assert DeadLetter.objects.filter(resolution=Resolution.DISCARDED).count() == 0
    done = csrf_post(browser, DLQ_URL, DLQ_URL, {**selected, "confirm": "yes"})

    assert messages_of(done) == [f"2 discarded, 1 skipped: #{already.pk} skipped (already retried)"]
    for dead_letter in (first, second):
        dead_letter.refresh_from_db()
        assert (dead_letter.resolution, dead_letter.resolved_by) == (Resolution.DISCARDED, support_user)
        [entry] = audit_entries(dead_letter)
        assert (entry.user, entry.action_flag, entry.get_change_message()) == (support_user, CHANGE, "Discarded: discarded")
    assert audit_entries(already) == []
    assert Notification.objects.get(pk=first.notification_id).status == Status.FAILED


def test_discard_from_the_detail_page_confirms_first(support_user: Any) -> None:
    dead_letter = make_dead_letter(make_api_client()[0])
    browser = enforcing_csrf(support_user)

    confirmation = browser.get(f"{DLQ_URL}{dead_letter.pk}/discard/")
    assert b"Discard this dead letter?" in confirmation.content
    assert DeadLetter.objects.get(pk=dead_letter.pk).resolution == Resolution.UNRESOLVED

    response = csrf_post(
        browser, f"{DLQ_URL}{dead_letter.pk}/discard/", f"{DLQ_URL}{dead_letter.pk}/discard/", {"confirm": "yes"}
    )

    assert messages_of(response) == ["1 discarded, 0 skipped"]
    assert DeadLetter.objects.get(pk=dead_letter.pk).resolution == Resolution.DISCARDED


def test_cancel_from_the_detail_page_cancels_a_pending_notification_and_logs_it(support_user: Any) -> None:
    api_client, _ = make_api_client()
    notification = make_notification(api_client, status=Status.ACCEPTED)
    delivered = make_notification(api_client, status=Status.DELIVERED)
    browser = enforcing_csrf(support_user)
    page = f"{NOTIFICATIONS_URL}{notification.pk}/change/"

    assert b"cancel-button" not in browser.get(f"{NOTIFICATIONS_URL}{delivered.pk}/change/").content
    response = csrf_post(browser, page, f"{NOTIFICATIONS_URL}{notification.pk}/cancel/")

    assert messages_of(response) == ["1 cancelled, 0 skipped"]
    assert Notification.objects.get(pk=notification.pk).status == Status.CANCELLED
    [entry] = audit_entries(notification)
    assert (entry.user, entry.get_change_message()) == (support_user, "Cancelled")
    again = browser.post(
        f"{NOTIFICATIONS_URL}{notification.pk}/cancel/", {"csrfmiddlewaretoken": browser.cookies["csrftoken"].value}
    )
    assert again.status_code == 302
    assert len(audit_entries(notification)) == 1


# --- Retry with a real worker --------------------------------------------------------------------


def failed_by_smtp(smtp_server: LocalSmtpServer, address: str) -> DeadLetter:
    """A notification the real worker sent and the SMTP server refused for good."""
    api_client, _ = make_api_client()
    smtp_server.refuse(address)
    notification = accept_notification(api_client, to=address, subject="Try again")
    wait_until(lambda: Notification.objects.get(pk=notification.pk).status == Status.FAILED, timeout=20, message="failed")
    smtp_server.handler.refused.discard(address)
    return DeadLetter.objects.get(notification=notification)


def delivered_to(smtp_server: LocalSmtpServer, dead_letter: DeadLetter) -> Notification:
    return wait_until(
        lambda: Notification.objects.filter(pk=dead_letter.notification_id, status=Status.DELIVERED).first(),
        timeout=20,
        message="delivered after the retry",
    )


@pytest.mark.django_db(transaction=True)
def test_the_retry_button_re_enqueues_and_the_worker_delivers_and_the_retry_is_logged(
    worker: Any, smtp_server: LocalSmtpServer
) -> None:
    dead_letter = failed_by_smtp(smtp_server, "ann@example.com")
    user = User.objects.create_user("sam", password="support-pass-1", is_staff=True)
    user.groups.add(support_group())
    browser = enforcing_csrf(user)
    detail = f"{DLQ_URL}{dead_letter.pk}/change/"
    assert b"retry-button" in browser.get(detail).content

    response = csrf_post(browser, detail, f"{DLQ_URL}{dead_letter.pk}/retry/")

    assert messages_of(response) == ["1 retried, 0 skipped"]
    notification = delivered_to(smtp_server, dead_letter)
    assert [m.rcpt_tos for m in smtp_server.received] == [["ann@example.com"]]
    assert list(notification.attempts.order_by("number").values_list("outcome", flat=True)) == [
        AttemptOutcome.PERMANENT_ERROR,
        AttemptOutcome.DELIVERED,
    ]
    dead_letter.refresh_from_db()
    assert (dead_letter.resolution, dead_letter.resolved_by) == (Resolution.RETRIED, user)
    [entry] = audit_entries(dead_letter)
    assert (entry.user, entry.action_flag, entry.get_change_message()) == (user, CHANGE, "Retried: re-enqueued")
    # The list now shows who retried it and the new outcome, and no second button.
    page = browser.get(DLQ_URL).content.decode()
    assert "Retried by sam" in page and "delivered" in page
    assert f"/deadletter/{dead_letter.pk}/retry/" not in page
    again = csrf_post(browser, DLQ_URL, f"{DLQ_URL}{dead_letter.pk}/retry/?next=list")
    assert messages_of(again) == [f"0 retried, 1 skipped: #{dead_letter.pk} skipped (already retried)"]
    assert len(smtp_server.received) == 1


@pytest.mark.django_db(transaction=True)
def test_bulk_retry_shows_a_confirmation_then_re_enqueues_and_the_worker_delivers(
    worker: Any, smtp_server: LocalSmtpServer
) -> None:
    letters = [failed_by_smtp(smtp_server, f"bulk{i}@example.com") for i in range(2)]
    user = User.objects.create_user("sam", password="support-pass-1", is_staff=True)
    user.groups.add(support_group())
    browser = enforcing_csrf(user)
    selected = {"action": "retry_selected", "_selected_action": [dl.pk for dl in letters]}

    confirmation = csrf_post(browser, DLQ_URL, DLQ_URL, {**selected, "index": "0"})
    assert b"Retry these 2 dead letters?" in confirmation.content
    assert not DeadLetter.objects.filter(resolution=Resolution.RETRIED).exists()

    response = csrf_post(browser, DLQ_URL, DLQ_URL, {**selected, "confirm": "yes"})

    assert messages_of(response) == ["2 retried, 0 skipped"]
    for dead_letter in letters:
        delivered_to(smtp_server, dead_letter)
        [entry] = audit_entries(dead_letter)
        assert entry.user == user and entry.get_change_message() == "Retried: re-enqueued"
    assert sorted(m.rcpt_tos[0] for m in smtp_server.received) == ["bulk0@example.com", "bulk1@example.com"]


# --- API clients ---------------------------------------------------------------------------------


def test_a_superuser_creates_rotates_and_revokes_api_clients_and_sees_each_token_once(superuser: Client) -> None:
    created = superuser.post("/admin/notifications/apiclient/add/", {"name": "billing"}, follow=True)

    [message] = [m for m in messages_of(created) if "API token" in m]
    token = re.search(r"ntf_[\w-]+", message)
    assert token is not None and "not shown again" in message
    client = ApiClient.objects.get(name="billing")
    assert client.token_hash == hash_token(token.group(0))
    assert token.group(0) not in superuser.get(f"/admin/notifications/apiclient/{client.pk}/change/").content.decode()

    rotated = superuser.post(
        "/admin/notifications/apiclient/",
        {"action": "rotate_token_selected", "_selected_action": [client.pk], "index": "0"},
        follow=True,
    )
    new_token = re.search(r"ntf_[\w-]+", messages_of(rotated)[0])
    assert new_token is not None and new_token.group(0) != token.group(0)
    client.refresh_from_db()
    assert client.token_hash == hash_token(new_token.group(0)) and client.token_rotated_at is not None

    revoked = superuser.post(
        "/admin/notifications/apiclient/",
        {"action": "revoke_selected", "_selected_action": [client.pk], "index": "0"},
        follow=True,
    )
    assert messages_of(revoked) == ["1 revoked, 0 skipped"]
    client.refresh_from_db()
    assert client.is_active is False
    assert [e.get_change_message() for e in audit_entries(client)] == ["Added.", "Rotated token", "Revoked"]


# --- Retention -----------------------------------------------------------------------------------


def test_purge_deletes_old_finished_notifications_attempts_and_expired_keys_but_keeps_unresolved_dead_letters(
    db: None,
) -> None:
    api_client, _ = make_api_client()
    now = timezone.now()
    long_ago = now - timedelta(days=45)

    def aged(notification: Notification) -> Notification:
        Notification.objects.filter(pk=notification.pk).update(created_at=long_ago)
        return notification

    old_delivered = aged(make_notification(api_client, status=Status.DELIVERED))
    DeliveryAttempt.objects.create(notification=old_delivered, number=1, outcome=AttemptOutcome.DELIVERED)
    old_pending = aged(make_notification(api_client, status=Status.RETRYING))
    unresolved = make_dead_letter(api_client)
    aged(unresolved.notification)
    resolved = make_dead_letter(api_client, resolution=Resolution.DISCARDED, resolved_at=long_ago)
    aged(resolved.notification)
    recent = make_notification(api_client, status=Status.DELIVERED)
    expired_key = IdempotencyKey.objects.create(
        client=api_client, key="old", fingerprint="f", expires_at=now - timedelta(hours=1)
    )
    live_key = IdempotencyKey.objects.create(client=api_client, key="new", fingerprint="f", expires_at=now + timedelta(hours=1))
    out = io.StringIO()

    call_command("purge_notifications", "--older-than", "30d", "--batch-size", "1", stdout=out)
    assert out.getvalue().rstrip().endswith("(older than 30 days)")

    remaining = set(Notification.objects.values_list("pk", flat=True))
    assert remaining == {old_pending.pk, unresolved.notification_id, recent.pk}
    assert not DeliveryAttempt.objects.filter(notification_id=old_delivered.pk).exists()
    assert set(DeadLetter.objects.values_list("pk", flat=True)) == {unresolved.pk}
    assert set(IdempotencyKey.objects.values_list("pk", flat=True)) == {live_key.pk}
    assert not IdempotencyKey.objects.filter(pk=expired_key.pk).exists()
    assert "deleted 2 notifications, 1 attempts, 1 resolved dead letters, 1 expired idempotency keys" in out.getvalue()


def test_purge_defaults_to_the_retention_setting(db: None, settings: Any) -> None:
    settings.NOTIFICATIONS = {**settings.NOTIFICATIONS, "RETENTION_DAYS": 10}
    api_client, _ = make_api_client()
    eleven_days = make_notification(api_client)
    nine_days = make_notification(api_client)
    Notification.objects.filter(pk=eleven_days.pk).update(created_at=timezone.now() - timedelta(days=11))
    Notification.objects.filter(pk=nine_days.pk).update(created_at=timezone.now() - timedelta(days=9))

    call_command("purge_notifications", stdout=io.StringIO())

    assert set(Notification.objects.values_list("pk", flat=True)) == {nine_days.pk}


def test_purge_refuses_an_age_it_cannot_read(db: None) -> None:
    from django.core.management.base import CommandError

    with pytest.raises(CommandError, match="30d"):
        call_command("purge_notifications", "--older-than", "a month")


def test_an_event_dead_letter_whose_body_is_not_json_is_shown_as_escaped_text(support: Client) -> None:
    dead_letter = DeadLetter.objects.create(
        source=DeadLetterSource.EVENT, reason=DeadLetterReason.POISON_MESSAGE, raw_body="not json <at all>"
    )
    page = support.get(f"{DLQ_URL}{dead_letter.pk}/change/").content.decode()
    assert "not json &lt;at all&gt;" in page


@pytest.mark.django_db(transaction=True)
def test_retrying_an_event_dead_letter_in_the_admin_republishes_its_raw_body_to_the_exchange(
    broker: Any,
) -> None:
    import pika
    from django.conf import settings

    from notifications import events
    from notifications.conf import get_config

    config = get_config().events
    user = User.objects.create_user("sam", password="support-pass-1", is_staff=True)
    user.groups.add(support_group())
    raw_body = '{"order_id": 42, "amount": "lots"}'
    dead_letter = DeadLetter.objects.create(
        source=DeadLetterSource.EVENT, reason=DeadLetterReason.POISON_MESSAGE, routing_key="order.created", raw_body=raw_body
    )
    connection_ = pika.BlockingConnection(pika.URLParameters(settings.BROKER_URL))
    channel = connection_.channel()
    try:
        events.declare_topology(channel, config)
        # A queue of this test's own on the exchange, so the consumer's queues are left alone.
        watcher = channel.queue_declare(queue="", exclusive=True, auto_delete=True).method.queue
        channel.queue_bind(queue=watcher, exchange=config.exchange, routing_key="order.created")
        browser = enforcing_csrf(user)

        response = csrf_post(browser, f"{DLQ_URL}{dead_letter.pk}/change/", f"{DLQ_URL}{dead_letter.pk}/retry/")

        assert messages_of(response) == ["1 retried, 0 skipped"]

        def republished() -> bytes | None:
            method, _, body = channel.basic_get(queue=watcher, auto_ack=True)
            return body if method else None

        body = wait_until(republished, timeout=10, message="the raw body back on the exchange")
        assert body.decode() == raw_body
    finally:
        # The consumer's own queue got the message too; leave this run's vhost empty for later tests.
        channel.queue_purge(queue=config.queue)
        connection_.close()
    dead_letter.refresh_from_db()
    assert (dead_letter.resolution, dead_letter.resolved_by) == (Resolution.RETRIED, user)
    [entry] = audit_entries(dead_letter)
    assert entry.get_change_message() == "Retried: republished"


# --- Review: refusals by POST, no second enqueue, bounded index, escaping ------------------------


def test_support_posts_to_change_and_delete_pages_are_refused_and_change_nothing(support: Client, support_user: Any) -> None:
    api_client, _ = make_api_client("shop")
    notification = make_notification(api_client)
    dead_letter = make_dead_letter(api_client)
    other = User.objects.create_user("olga", password="olga-pass-1")
    group = support_group()
    urls_and_data: list[tuple[str, dict[str, Any]]] = [
        (f"{NOTIFICATIONS_URL}{notification.pk}/change/", {"message": "edited", "status": "queued"}),
        (f"{NOTIFICATIONS_URL}{notification.pk}/delete/", {"post": "yes"}),
        (f"{DLQ_URL}{dead_letter.pk}/change/", {"last_error": "edited", "resolution": "discarded"}),
        (f"{DLQ_URL}{dead_letter.pk}/delete/", {"post": "yes"}),
        (f"{DLQ_URL}add/", {"reason": "poison_message"}),
        (f"/admin/auth/user/{other.pk}/change/", {"username": "olga", "is_superuser": "on", "is_staff": "on"}),
        (f"/admin/auth/user/{other.pk}/delete/", {"post": "yes"}),
        (f"/admin/auth/user/{support_user.pk}/change/", {"username": "sam", "is_superuser": "on", "is_staff": "on"}),
        ("/admin/auth/user/add/", {"username": "eve", "password1": "eve-pass-12345", "password2": "eve-pass-12345"}),
        (
            f"/admin/auth/group/{group.pk}/change/",
            {"name": "support", "permissions": list(Permission.objects.values_list("pk", flat=True))},
        ),
        (f"/admin/auth/group/{group.pk}/delete/", {"post": "yes"}),
        ("/admin/auth/group/add/", {"name": "admins"}),
        ("/admin/notifications/apiclient/add/", {"name": "sneaky"}),
        (f"/admin/notifications/apiclient/{api_client.pk}/change/", {"name": "renamed"}),
        (f"/admin/notifications/apiclient/{api_client.pk}/delete/", {"post": "yes"}),
    ]

    for url, data in urls_and_data:
        assert support.post(url, data).status_code == 403, url
    # The bulk delete action is not offered either: a forged POST of it deletes nothing.
    support.post(
        NOTIFICATIONS_URL, {"action": "delete_selected", "_selected_action": [notification.pk], "post": "yes", "index": "0"}
    )
    support.post(DLQ_URL, {"action": "delete_selected", "_selected_action": [dead_letter.pk], "post": "yes", "index": "0"})

    notification.refresh_from_db()
    dead_letter.refresh_from_db()
    support_user.refresh_from_db()
    assert (notification.message, notification.status) == ("It shipped.", Status.DELIVERED)
    assert (dead_letter.last_error, dead_letter.resolution) == ("550 5.1.1 no such user", Resolution.UNRESOLVED)
    assert User.objects.filter(pk=other.pk).exists() and not User.objects.filter(username="eve").exists()
    assert not support_user.is_superuser
    granted = [
        *SUPPORT_MIGRATION.SUPPORT_PERMISSIONS,
        *FEEDBACK_MIGRATION.SUPPORT_PERMISSIONS,
        *TEST_MODE_MIGRATION.SUPPORT_PERMISSIONS,
        ("inboxitem", "view_inboxitem"),  # the inbox migration's: a recipient's in-app inbox
    ]
    assert set(group.permissions.values_list("codename", flat=True)) == {c for _, c in granted}
    assert not Group.objects.filter(name="admins").exists()
    assert sorted(ApiClient.objects.values_list("name", flat=True)) == ["shop"]
    assert DeadLetter.objects.count() == 1


def test_a_second_retry_or_a_retry_of_a_delivered_notification_enqueues_nothing(
    support_user: Any, django_capture_on_commit_callbacks: Any
) -> None:
    api_client, _ = make_api_client()
    dead_letter = make_dead_letter(api_client)
    delivered = make_dead_letter(api_client, status=Status.DELIVERED)
    browser = enforcing_csrf(support_user)
    retry = f"{DLQ_URL}{dead_letter.pk}/retry/?next=list"

    with django_capture_on_commit_callbacks() as first:
        csrf_post(browser, DLQ_URL, retry)
    with django_capture_on_commit_callbacks() as second:
        again = csrf_post(browser, f"{DLQ_URL}{dead_letter.pk}/change/", retry)
    with django_capture_on_commit_callbacks() as third:
        refused = csrf_post(browser, DLQ_URL, f"{DLQ_URL}{delivered.pk}/retry/?next=list")

    assert len(first) == 1  # the one enqueue, on commit
    assert (len(second), len(third)) == (0, 0)
    assert messages_of(again) == [f"0 retried, 1 skipped: #{dead_letter.pk} skipped (already retried)"]
    assert "its notification is delivered" in messages_of(refused)[0]
    notification = Notification.objects.get(pk=dead_letter.notification_id)
    assert (notification.status, notification.enqueued_at) == (Status.QUEUED, None)
    assert Notification.objects.get(pk=delivered.notification_id).status == Status.DELIVERED
    assert len(audit_entries(dead_letter)) == 1 and audit_entries(delivered) == []


def test_the_admin_index_health_block_runs_a_bounded_number_of_queries(support: Client) -> None:
    api_client, _ = make_api_client()
    make_dead_letter(api_client)
    few = changelist_queries(support, "/admin/")
    for status in (Status.DELIVERED, Status.FAILED, Status.DEAD, Status.QUEUED, Status.CANCELLED) * 4:
        make_notification(api_client, status=status)
    for _ in range(10):
        make_dead_letter(api_client)

    with CaptureQueriesContext(connection) as queries:
        page = support.get("/admin/").content.decode()

    assert len(queries.captured_queries) == few
    # The dashboard (selectors/dashboard.py): the other statuses from the notifications' index; by
    # hour, by account, the failure reasons and the latency from the counters; the dead letters.
    health_queries = [q["sql"] for q in queries.captured_queries if "notifications_" in q["sql"]]
    assert len(health_queries) == 6, health_queries
    assert re.search(r'id="unresolved-dead-letters"><strong>11<', page)


def test_the_dead_letter_list_query_count_does_not_grow_with_resolved_rows(support: Client, support_user: Any) -> None:
    api_client, _ = make_api_client()
    make_dead_letter(api_client, resolution=Resolution.RETRIED, resolved_by=support_user, resolved_at=timezone.now())
    few = changelist_queries(support, DLQ_URL)
    for i in range(20):
        resolver = User.objects.create_user(f"resolver{i}")
        make_dead_letter(api_client, resolution=Resolution.DISCARDED, resolved_by=resolver, resolved_at=timezone.now())
        DeadLetter.objects.create(source=DeadLetterSource.EVENT, reason=DeadLetterReason.POISON_MESSAGE, raw_body="{}")

    assert changelist_queries(support, DLQ_URL) == few
    assert changelist_queries(support, f"{DLQ_URL}?resolved=yes&q=550") == changelist_queries(support, f"{DLQ_URL}?resolved=yes")


def test_an_event_dead_letters_script_body_headers_and_error_are_rendered_escaped(support: Client) -> None:
    script = "<script>alert(1)</script>"
    as_json = DeadLetter.objects.create(
        source=DeadLetterSource.EVENT,
        reason=DeadLetterReason.POISON_MESSAGE,
        routing_key=f"order.{script}",
        raw_body=json.dumps({"note": script}),
        headers={"x-note": script},
        last_error=f"bad event {script}",
    )
    as_text = DeadLetter.objects.create(
        source=DeadLetterSource.EVENT, reason=DeadLetterReason.POISON_MESSAGE, raw_body=f"not json {script}"
    )

    pages = [
        support.get(f"{DLQ_URL}{as_json.pk}/change/").content.decode(),
        support.get(f"{DLQ_URL}{as_text.pk}/change/").content.decode(),
        support.get(DLQ_URL).content.decode(),
    ]

    for page in pages:
        assert "<script>alert(1)" not in page
    assert "&quot;note&quot;: &quot;&lt;script&gt;alert(1)&lt;/script&gt;&quot;" in pages[0]
    assert "order.&lt;script&gt;alert(1)&lt;/script&gt;" in pages[0]
    assert "&quot;x-note&quot;: &quot;&lt;script&gt;" in pages[0]
    assert "bad event &lt;script&gt;alert(1)&lt;/script&gt;" in pages[0] and "bad event &lt;script&gt;" in pages[2]
    assert "not json &lt;script&gt;alert(1)&lt;/script&gt;" in pages[1]


@pytest.mark.django_db(transaction=True)
def test_retry_on_a_failed_notifications_own_page_redrives_its_dead_letter_audited_like_the_dead_letters(
    worker: Any, smtp_server: LocalSmtpServer
) -> None:
    dead_letter = failed_by_smtp(smtp_server, "ann@example.com")
    user = User.objects.create_user("sam", password="support-pass-1", is_staff=True)
    user.groups.add(support_group())
    browser = enforcing_csrf(user)
    detail = f"{NOTIFICATIONS_URL}{dead_letter.notification_id}/change/"
    assert b"retry-button" in browser.get(detail).content

    response = csrf_post(browser, detail, f"{NOTIFICATIONS_URL}{dead_letter.notification_id}/retry/")

    assert messages_of(response) == ["1 retried, 0 skipped"]
    assert response.redirect_chain[-1][0] == detail
    notification = delivered_to(smtp_server, dead_letter)
    assert [m.rcpt_tos for m in smtp_server.received] == [["ann@example.com"]]
    dead_letter.refresh_from_db()
    assert (dead_letter.resolution, dead_letter.resolved_by) == (Resolution.RETRIED, user)
    [entry] = audit_entries(dead_letter)  # the same entry as the dead letter's own Retry writes
    assert (entry.user, entry.action_flag, entry.get_change_message()) == (user, CHANGE, "Retried: re-enqueued")
    [entry] = audit_entries(notification)
    assert (entry.user, entry.get_change_message()) == (user, f"Retried (dead letter #{dead_letter.pk})")
    # Delivered now: no Retry, and a second post retries nothing.
    assert b"retry-button" not in browser.get(detail).content
    again = csrf_post(browser, detail, f"{NOTIFICATIONS_URL}{dead_letter.notification_id}/retry/")
    assert messages_of(again) == ["0 retried, 1 skipped: it is delivered with no unresolved dead letter to retry"]
    assert len(smtp_server.received) == 1


def test_the_dlq_list_has_an_age_column_ordered_by_when_the_letter_moved(support: Client) -> None:
    api_client, _ = make_api_client()
    old = make_dead_letter(api_client)
    DeadLetter.objects.filter(pk=old.pk).update(moved_at=timezone.now() - timedelta(days=3, hours=2))
    new = make_dead_letter(api_client)

    response = support.get(DLQ_URL)
    page = response.content.decode()

    assert "column-age" in page
    assert "3\xa0days, 2\xa0hours" in page
    assert [dl.pk for dl in response.context["cl"].result_list] == [new.pk, old.pk]


@pytest.mark.parametrize("value", ["0d", "0", "a month", "30x", "-5d", "99999999999999d", "3000000d"])
def test_purge_refuses_an_age_of_zero_out_of_range_or_unreadable_with_a_command_error(db: None, value: str) -> None:
    from django.core.management.base import CommandError

    notification = make_notification(make_api_client()[0])
    Notification.objects.filter(pk=notification.pk).update(created_at=timezone.now() - timedelta(days=1))

    with pytest.raises(CommandError, match="--older-than"):
        call_command("purge_notifications", "--older-than", value, stdout=io.StringIO())

    assert Notification.objects.filter(pk=notification.pk).exists()


def test_purge_refuses_a_batch_size_below_one(db: None) -> None:
    from django.core.management.base import CommandError

    with pytest.raises(CommandError, match="--batch-size"):
        call_command("purge_notifications", "--older-than", "30d", "--batch-size", "0", stdout=io.StringIO())


def test_bulk_retry_of_every_filtered_row_confirms_without_listing_each_id_and_retries_only_those(support_user: Any) -> None:
    api_client, _ = make_api_client()
    count = 1010  # more form fields than Django accepts in one POST (DATA_UPLOAD_MAX_NUMBER_FIELDS)
    notifications = Notification.objects.bulk_create(
        Notification(client=api_client, user_id="u1", channel="sms", address="+15550100", message="m", status=Status.DEAD)
        for _ in range(count)
    )
    DeadLetter.objects.bulk_create(
        DeadLetter(notification=n, channel="sms", reason=DeadLetterReason.RETRIES_EXHAUSTED, attempts=5) for n in notifications
    )
    email = make_dead_letter(api_client)
    already = make_dead_letter(api_client, channel="sms", resolution=Resolution.DISCARDED)
    browser = enforcing_csrf(support_user)
    listing = f"{DLQ_URL}?channel=sms"
    page_ids = [dl.pk for dl in browser.get(listing).context["cl"].result_list]
    selected = {"action": "retry_selected", "select_across": "1", "_selected_action": page_ids, "index": "0"}

    confirmation = csrf_post(browser, listing, listing, selected)

    assert f"Retry these {count + 1} dead letters?".encode() in confirmation.content
    form = confirmation.content.decode().split('<form method="post"')[-1]
    hidden = dict(re.findall(r'<input type="hidden" name="(\w+)" value="([^"]*)"', form))
    assert hidden.get("select_across") == "1"
    assert form.count('name="_selected_action"') < 10
    assert DeadLetter.objects.filter(resolution=Resolution.RETRIED).count() == 0

    done = csrf_post(browser, listing, listing, {**hidden, "confirm": "yes"})

    assert done.status_code == 200
    assert messages_of(done)[0].startswith(f"{count} retried, 1 skipped: #{already.pk} skipped (already discarded)")
    assert DeadLetter.objects.filter(resolution=Resolution.RETRIED, resolved_by=support_user).count() == count
    assert DeadLetter.objects.get(pk=email.pk).resolution == Resolution.UNRESOLVED


def test_bulk_retry_of_more_ticked_rows_than_the_confirmation_lists_retries_every_ticked_row(support_user: Any) -> None:
    api_client, _ = make_api_client()
    letters = [make_dead_letter(api_client) for _ in range(120)]  # a "Show all" page ticks up to 200
    untouched = make_dead_letter(api_client)
    browser = enforcing_csrf(support_user)
    selected = {"action": "retry_selected", "_selected_action": [dl.pk for dl in letters], "index": "0"}

    confirmation = csrf_post(browser, DLQ_URL, DLQ_URL, selected)

    page = confirmation.content.decode()
    assert "Retry these 120 dead letters?" in page and "and 20 more" in page
    form = page.split('<form method="post"')[-1]
    posted_back = [int(pk) for pk in re.findall(r'name="_selected_action" value="(\d+)"', form)]
    assert sorted(posted_back) == sorted(dl.pk for dl in letters)
    done = csrf_post(browser, DLQ_URL, DLQ_URL, {"action": "retry_selected", "_selected_action": posted_back, "confirm": "yes"})

    assert messages_of(done) == ["120 retried, 0 skipped"]
    assert DeadLetter.objects.get(pk=untouched.pk).resolution == Resolution.UNRESOLVED


@pytest.mark.services
def test_purge_deletes_in_short_batches_and_removes_expired_event_dedup_records(db: None) -> None:
    from notifications.models import ProcessedEvent

    api_client, _ = make_api_client()
    now = timezone.now()
    old = [make_notification(api_client) for _ in range(5)]
    Notification.objects.filter(pk__in=[n.pk for n in old]).update(created_at=now - timedelta(days=40))
    for notification in old:
        DeliveryAttempt.objects.create(notification=notification, number=1, outcome=AttemptOutcome.DELIVERED)
    expired_event = ProcessedEvent.objects.create(event_key="order-1", notification=old[0], expires_at=now - timedelta(hours=1))
    live_event = ProcessedEvent.objects.create(event_key="order-2", expires_at=now + timedelta(hours=1))
    out = io.StringIO()

    with CaptureQueriesContext(connection) as queries:
        call_command("purge_notifications", "--older-than", "30d", "--batch-size", "2", stdout=out)

    sqls = [q["sql"] for q in queries.captured_queries]
    notification_deletes = [sql for sql in sqls if sql.startswith('DELETE FROM "notifications_notification"')]
    assert len(notification_deletes) == 3  # 2 + 2 + 1, never one statement for the whole table
    assert [sql.count("::uuid") for sql in notification_deletes] == [2, 2, 1]  # bounded IN lists
    assert len([sql for sql in sqls if sql.startswith("SAVEPOINT")]) == 3  # one transaction per batch
    assert not [sql for sql in sqls if "LOCK TABLE" in sql.upper()]
    assert not Notification.objects.filter(pk__in=[n.pk for n in old]).exists()
    assert list(ProcessedEvent.objects.values_list("pk", flat=True)) == [live_event.pk]
    assert not ProcessedEvent.objects.filter(pk=expired_event.pk).exists()
    assert "5 notifications, 5 attempts" in out.getvalue() and "1 expired event dedup records" in out.getvalue()


def test_sorting_the_dlq_by_age_puts_the_youngest_first_and_reversed_the_oldest(support: Client) -> None:
    api_client, _ = make_api_client()
    oldest, middle, youngest = (make_dead_letter(api_client) for _ in range(3))
    for dead_letter, days in ((oldest, 5), (middle, 2), (youngest, 0)):
        DeadLetter.objects.filter(pk=dead_letter.pk).update(moved_at=timezone.now() - timedelta(days=days, minutes=1))
    column = support.get(DLQ_URL).context["cl"].list_display.index("age")

    def ids(order: str) -> list[int]:
        return [dl.pk for dl in support.get(DLQ_URL, {"o": order}).context["cl"].result_list]

    assert ids(str(column)) == [youngest.pk, middle.pk, oldest.pk]
    assert ids(f"-{column}") == [oldest.pk, middle.pk, youngest.pk]


def test_bulk_cancel_logs_each_cancel_with_the_user_and_an_outsider_cannot_cancel(support_user: Any, outsider: Client) -> None:
    api_client, _ = make_api_client()
    pending = [make_notification(api_client, status=Status.ACCEPTED) for _ in range(2)]
    delivered = make_notification(api_client, status=Status.DELIVERED)
    guarded = make_notification(api_client, status=Status.QUEUED)

    assert outsider.post(f"{NOTIFICATIONS_URL}{guarded.pk}/cancel/").status_code == 403
    outsider.post(NOTIFICATIONS_URL, {"action": "cancel_selected", "_selected_action": [guarded.pk], "index": "0"})
    assert Notification.objects.get(pk=guarded.pk).status == Status.QUEUED

    browser = enforcing_csrf(support_user)
    selected = [n.pk for n in (*pending, delivered)]
    done = csrf_post(
        browser, NOTIFICATIONS_URL, NOTIFICATIONS_URL, {"action": "cancel_selected", "_selected_action": selected, "index": "0"}
    )

    assert messages_of(done) == ["2 cancelled, 1 skipped"]
    for notification in pending:
        assert Notification.objects.get(pk=notification.pk).status == Status.CANCELLED
        [entry] = audit_entries(notification)
        assert (entry.user, entry.action_flag, entry.get_change_message()) == (support_user, CHANGE, "Cancelled")
    assert audit_entries(delivered) == [] and audit_entries(guarded) == []


def test_a_row_retry_returns_to_the_filtered_list_it_was_clicked_on_and_never_to_another_site(support_user: Any) -> None:
    api_client, _ = make_api_client()
    first, second = make_dead_letter(api_client, channel="sms"), make_dead_letter(api_client, channel="sms")
    browser = enforcing_csrf(support_user)
    listing = f"http://testserver{DLQ_URL}?channel=sms&resolved=no"
    token = re.search(rb'name="csrfmiddlewaretoken" value="([^"]+)"', browser.get(listing).content)
    assert token is not None

    def retry(dead_letter: DeadLetter, referer: str) -> str:
        response = browser.post(
            f"{DLQ_URL}{dead_letter.pk}/retry/?next=list",
            {"csrfmiddlewaretoken": token.group(1).decode()},
            headers={"referer": referer},
        )
        assert response.status_code == 302
        return response["Location"]

    assert retry(first, listing) == f"{DLQ_URL}?channel=sms&resolved=no"
    assert retry(second, "https://evil.example.com/admin/notifications/deadletter/?x=1") == DLQ_URL
    assert DeadLetter.objects.filter(resolution=Resolution.RETRIED).count() == 2


@pytest.mark.services
def test_a_large_unfiltered_changelist_is_counted_from_postgresqls_estimate_and_a_filtered_one_exactly(
    support: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    from notifications.admin.base import LargeTablePaginator

    client, _ = make_api_client()
    for n in range(12):
        accept_notification(client, to=f"u{n}@example.com")
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE notifications_notification")
    monkeypatch.setattr(LargeTablePaginator, "estimate_above", 10)
    url = "/admin/notifications/notification/"
    with CaptureQueriesContext(connection) as unfiltered:
        page = support.get(url)
    assert page.status_code == 200 and page.context["cl"].result_count == 12
    assert not [q["sql"] for q in unfiltered.captured_queries if "COUNT(*)" in q["sql"].upper()]
    with CaptureQueriesContext(connection) as filtered:
        page = support.get(url, {"status__exact": "queued"})
    assert page.context["cl"].result_count == 12
    assert [q["sql"] for q in filtered.captured_queries if "COUNT(*)" in q["sql"].upper()]


def test_support_sees_a_recipients_inbox_items_and_their_states(support: Client) -> None:
    from notifications.models import InboxItem

    from .inbox_helpers import deliver_item

    api_client, _ = make_api_client()
    read = deliver_item(api_client, "ann", "Order shipped")
    deliver_item(api_client, "ann", "Sale starts")
    deliver_item(api_client, "bob", "Not ann's")
    InboxItem.objects.filter(pk=read.pk).update(seen_at=read.created_at, read_at=read.created_at)

    page = support.get(f"/admin/notifications/inboxitem/?client__id__exact={api_client.pk}&q=ann")

    assert page.status_code == 200
    text = page.content.decode()
    assert "Order shipped" in text and "Sale starts" in text and "Not ann&#x27;s" not in text and "Not ann's" not in text
    assert '<td class="field-state">read</td>' in text and '<td class="field-state">unseen</td>' in text
    assert support.get(f"/admin/notifications/inboxitem/{read.pk}/change/").status_code == 200
    assert support.post(f"/admin/notifications/inboxitem/{read.pk}/delete/").status_code == 403
