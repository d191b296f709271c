"""A client's status-webhook settings: where its status events go, and the secret that signs
them (and its webhook notifications), rotated without a gap."""

from __future__ import annotations

from django.db import transaction
from django.utils import timezone

from ...channels import validate_address
from ...channels.webhook.provider import NOT_PUBLIC, webhook_target
from ...conf import get_config
from ...errors import ChannelError, RateLimitExceeded, ValidationFailed
from ...models import ApiClient, webhook_secret_generate
from ...models.clients import MAX_RETIRED_WEBHOOK_SECRETS
from ...token_cache import api_client_changed

STATUS_WEBHOOK_FIELD = "status_webhook_url"
NOT_PUBLIC_ANSWER = f"{STATUS_WEBHOOK_FIELD}: its host is {NOT_PUBLIC} (or could not be resolved)"


def api_client_set_status_webhook_url(*, client: ApiClient, url: str) -> ApiClient:
    """Set (or, with an empty ``url``, clear) where the client's status events are posted.

    Checked as a webhook channel address and against the webhook channel's SSRF rules now, so a
    mistake is a 400 naming the field rather than dead events later; the post checks again (a DNS
    answer may change in between).
    """
    url = url.strip()
    if url:
        # Control characters (NUL) and lone surrogates can be neither stored nor a URL.
        if not url.isprintable():
            raise ValidationFailed("a URL may not contain control characters", extra={"field": STATUS_WEBHOOK_FIELD})
        try:
            validate_address("webhook", url, field=STATUS_WEBHOOK_FIELD)
            webhook_target(url, allow_hosts=get_config().webhook_allow_hosts)
        except ChannelError as exc:
            # One answer for an internal address and for a name that does not resolve (in time):
            # telling them apart would say which internal names exist.
            message = NOT_PUBLIC_ANSWER if exc.code in ("forbidden_target", "dns_error") else exc.message
            raise ValidationFailed(message, extra={"field": STATUS_WEBHOOK_FIELD}) from None
        except ValueError as exc:  # urlsplit's, e.g. "Invalid IPv6 URL"
            raise ValidationFailed(f"{url!r} is not a valid URL: {exc}", extra={"field": STATUS_WEBHOOK_FIELD}) from None
    ApiClient.objects.filter(pk=client.pk).update(status_webhook_url=url)
    api_client_changed()
    client.status_webhook_url = url
    return client


def api_client_rotate_webhook_secret(*, client: ApiClient) -> str:
    """Give the client a new webhook secret (``whsec_`` + base64 of 32 random bytes) and return
    it, the only time it is shown. It signs every webhook and status event posted from now on,
    those already pending included; the one it replaces signs them too (a second signature)
    for WEBHOOK_SECRET_GRACE_SECONDS, and so do those it replaced within theirs, however many. A
    client that has rotated MAX_RETIRED_WEBHOOK_SECRETS times within one grace period is refused
    (RateLimitExceeded) until the oldest of them ends: each signs every post meanwhile."""
    secret = webhook_secret_generate()
    grace_seconds = get_config().webhook_secret_grace_seconds
    with transaction.atomic():
        # Locked: two rotations at once must each keep the secret the other replaced.
        current = ApiClient.objects.select_for_update().get(pk=client.pk)
        now = timezone.now()  # after the lock: a rotation that waited for it is the later one
        moment = now.timestamp()
        retired = [[old, at] for old, at in current.webhook_secrets_retired if moment - at < grace_seconds]
        if current.webhook_secret:
            retired.insert(0, [current.webhook_secret, moment])
        if len(retired) > MAX_RETIRED_WEBHOOK_SECRETS:
            wait = retired[-1][1] + grace_seconds - moment
            raise RateLimitExceeded(
                f"the webhook secret was rotated {MAX_RETIRED_WEBHOOK_SECRETS} times within WEBHOOK_SECRET_GRACE_SECONDS, "
                "and each replaced secret still signs; try again once the oldest one's grace period ends",
                retry_after=max(1.0, wait),
                extra={"limit": "WEBHOOK_SECRET_GRACE_SECONDS", "value": MAX_RETIRED_WEBHOOK_SECRETS},
            )
        ApiClient.objects.filter(pk=client.pk).update(
            webhook_secret=secret, webhook_secrets_retired=retired, webhook_secret_rotated_at=now
        )
    client.webhook_secrets_retired, client.webhook_secret, client.webhook_secret_rotated_at = retired, secret, now
    api_client_changed()
    return secret
