"""Model factories as plain functions."""

from __future__ import annotations

import itertools
from typing import Any

from notifications import services
from notifications.models import ApiClient, Notification, NotificationTemplate, Recipient, TemplateVariant

_counter = itertools.count(1)


def make_api_client(name: str | None = None) -> tuple[ApiClient, str]:
    return services.api_client_create(name=name or f"client-{next(_counter)}")


def make_recipient(client: ApiClient, user_id: str = "u1", **fields: Any) -> Recipient:
    recipient, _ = services.recipient_upsert(client=client, user_id=user_id, data=fields)
    return recipient


def accept_notification(client: ApiClient, *, key: str | None = None, **fields: Any) -> Notification:
    """Accept through the real service, as the API does; returns the stored notification."""
    payload = {"user_id": "u1", "message": "hello", "to": "someone@example.com", **fields}
    request = services.NotificationRequest(**payload)
    result = services.notification_accept(
        client=client, request=request, idempotency_key=key, fingerprint=services.request_fingerprint(payload)
    )
    return Notification.objects.get(pk=result.notification_id)


def make_template(key: str = "welcome", client: ApiClient | None = None, **variant: str) -> NotificationTemplate:
    """A template (the platform's unless ``client``) with one email variant in en, HTML included."""
    template = NotificationTemplate.objects.create(client=client, key=key)
    values = {
        "channel": "email",
        "locale": "en",
        "subject": "Welcome, {{ name }}",
        "body": "Hello {{ name }}",
        "html_body": "<p>Hello <b>{{ name }}</b></p>",
        **variant,
    }
    TemplateVariant.objects.create(template=template, **values)
    return template
