"""API clients and the recipients they send to."""

from __future__ import annotations

import logging
from typing import Any

from django.db import IntegrityError, transaction
from django.db.models import Q
from django.utils import timezone

from ...channels import CHANNELS
from ...errors import (
    NotFound,
    ValidationFailed,
)
from ...inbox.live import wake_client
from ...locales import locale_normalize
from ...models import (
    ApiClient,
    Recipient,
    webhook_secret_generate,
)
from ...token_cache import api_client_changed
from ..policy.quiet_hours import quiet_hours_check, time_zone_check

logger = logging.getLogger("notifications.services")


def api_client_create(*, name: str) -> tuple[ApiClient, str]:
    """Create an API client; returns it with its token, which is shown this once only."""
    name = name.strip()
    if not name:
        raise ValidationFailed("an API client needs a name", extra={"field": "name"})
    if ApiClient.objects.filter(name=name, is_test=False).exists():
        raise ValidationFailed(f"an API client named {name!r} already exists", extra={"field": "name"})
    client = ApiClient(name=name, webhook_secret=webhook_secret_generate())
    token = client.set_new_token()
    client.save()
    api_client_changed()  # its token is known to every process's active hashes at once
    return client, token


def api_client_limits_set(*, client: ApiClient, topic_subscribers_max: int | None, broadcasts_per_hour_max: int | None) -> None:
    """Set the client's own limits (services/policy/limits.py); None: the setting's default. Only these
    two columns are written, so nothing else of the client changes with them."""
    for name, value in (("topic_subscribers_max", topic_subscribers_max), ("broadcasts_per_hour_max", broadcasts_per_hour_max)):
        if value is not None and value < 1:
            raise ValidationFailed(f"{name} must be at least 1 (or empty for the default)", extra={"field": name})
    client.topic_subscribers_max = topic_subscribers_max
    client.broadcasts_per_hour_max = broadcasts_per_hour_max
    ApiClient.objects.filter(pk=client.pk).update(
        topic_subscribers_max=topic_subscribers_max, broadcasts_per_hour_max=broadcasts_per_hour_max
    )
    api_client_changed()


def api_client_get_or_create(*, name: str) -> ApiClient:
    """The named (live) client, created (with a token nobody knows yet) when missing; race-safe."""
    client = ApiClient.objects.filter(name=name, is_test=False).first()
    if client is not None:
        return client
    candidate = ApiClient(name=name, webhook_secret=webhook_secret_generate())
    candidate.set_new_token()
    try:
        with transaction.atomic():
            candidate.save()
        return candidate
    except IntegrityError:
        return ApiClient.objects.get(name=name, is_test=False)


def api_client_test_token_issue(*, name: str) -> tuple[ApiClient, str]:
    """Issue a test token (``ntf_test_...``) for the live client ``name``, creating the client
    when missing; returns the client's test mode and the token, shown this once. Its test mode is
    made the first time (services/clients' rule: an ApiClient of its own, same name); after that
    each call gives it a new token, ending the previous test token."""
    name = name.strip()
    if not name:
        raise ValidationFailed("an API client needs a name", extra={"field": "name"})
    live = api_client_get_or_create(name=name)
    if live.is_test:
        raise ValidationFailed(f"{live} is itself a test mode", extra={"field": "name"})
    if not live.is_active:
        raise ValidationFailed(f"the API client {name!r} is revoked", extra={"field": "name"})
    with transaction.atomic():
        # The live row locked: two issuers at once make one test mode, not a constraint error.
        ApiClient.objects.select_for_update().filter(pk=live.pk).first()
        test = ApiClient.objects.filter(live_client=live).first()
        if test is None:
            test = ApiClient(name=live.name, is_test=True, live_client=live, webhook_secret=webhook_secret_generate())
        if test.pk is None:
            token = test.set_new_token()
            test.save()
            api_client_changed()
        else:
            test.is_active = True
            token = api_client_rotate_token(client=test, update_fields=("is_active",))
    return test, token


def api_client_rotate_token(*, client: ApiClient, update_fields: tuple[str, ...] = ()) -> str:
    """Give the client a new token (returned, shown once). The old one ends, and with it every
    inbox user token and stream ticket it made: they are refused from now on, and the streams open
    with them close in every process. The admin's action, `create_api_client --rotate`, a new
    test token and the demo's bootstrap all rotate here."""
    token = client.set_new_token()
    client.token_rotated_at = timezone.now()
    client.save(update_fields=["token_hash", "token_prefix", "token_rotated_at", *update_fields])
    api_client_changed()  # the old token ends now in this process, once this commits in every one
    rotated_at = client.token_rotated_at
    transaction.on_commit(lambda: wake_client(client_id=client.pk, issued_before=rotated_at))
    return token


def api_client_revoke(*, client: ApiClient) -> None:
    """Revoke the client's token, and its test mode's with a live client's; their inbox user
    tokens are refused from now on and their open streams close, in every process."""
    revoked = list(ApiClient.objects.filter(Q(pk=client.pk) | Q(live_client=client)).values_list("pk", flat=True))
    ApiClient.objects.filter(pk__in=revoked).update(is_active=False)
    client.is_active = False
    api_client_changed()
    transaction.on_commit(lambda: _wake_clients(revoked))


def _wake_clients(client_ids: list[int]) -> None:
    for client_id in client_ids:
        wake_client(client_id=client_id, issued_before=None)  # inactive: every token it made is refused


RECIPIENT_FIELDS = ("email", "phone", "push_tokens", "webhook_url", "locale", "timezone", "quiet_hours")
_EMPTY: dict[str, Any] = {"push_tokens": [], "quiet_hours": None}


def recipient_upsert(*, client: ApiClient, user_id: str, data: dict[str, Any]) -> tuple[Recipient, bool]:
    """Create or replace the client's recipient ``user_id``; addresses are validated per channel,
    the locale, time zone and quiet hours as such. Preferences are kept (they have their own PUT)."""
    values = {name: data.get(name, _EMPTY.get(name, "")) for name in RECIPIENT_FIELDS}
    if values["locale"]:
        values["locale"] = locale_normalize(str(values["locale"]))
    if values["timezone"]:
        values["timezone"] = time_zone_check(str(values["timezone"]))
    values["quiet_hours"] = quiet_hours_check(values["quiet_hours"], timezone=values["timezone"])
    for spec in CHANNELS.values():
        if spec.addressed_by_user_id:
            continue
        field = spec.recipient_field
        if spec.many:
            values[field] = [spec.validate(str(value).strip(), field) for value in values[field]]
        elif values[field]:
            values[field] = spec.validate(str(values[field]).strip(), field)
    recipient, created = Recipient.objects.update_or_create(client=client, user_id=user_id, defaults=values)
    return recipient, created


def recipient_delete(*, client: ApiClient, user_id: str) -> None:
    deleted, _ = Recipient.objects.filter(client=client, user_id=user_id).delete()
    if not deleted:
        raise NotFound(f"no recipient {user_id!r}")
