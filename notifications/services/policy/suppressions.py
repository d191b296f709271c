"""The suppression list: adding an address a provider reported as gone (a hard bounce, a spam
complaint, an SMS STOP, an unregistered device token), removing one. Looking one up before a send
is a read, in selectors/suppressions.py."""

from __future__ import annotations

import logging
from typing import Any

from django.db import transaction
from django.utils import timezone

from ...errors import NotFound, PermanentChannelError
from ...models import ApiClient, Notification, Recipient, Suppression, SuppressionReason
from ...selectors import suppression_list
from ...sql import insert_or_nothing

logger = logging.getLogger("notifications.services")

# What a provider's permanent refusal says about the address itself, by channel and the
# ``provider_code`` its channel module keeps on the error (channels/sms/provider.py, channels/push/provider.py).
PERMANENT_ERROR_REASONS: dict[tuple[str, str], str] = {
    ("sms", "21610"): SuppressionReason.UNSUBSCRIBED_SMS,  # Twilio: the recipient replied STOP
    ("push", "UNREGISTERED"): SuppressionReason.UNREGISTERED,  # FCM: the app was uninstalled, the token expired
}


def suppression_add(*, client_id: Any, channel: str, address: str, reason: str, notification_id: Any = None) -> bool:
    """Put the address on the client's suppression list; False when it is there already (the first
    reason stays). Never raises on a duplicate, so it is safe inside a caller's transaction."""
    added = insert_or_nothing(
        Suppression,
        {
            "client_id": client_id,
            "channel": channel,
            "address": address,
            "reason": reason,
            "created_at": timezone.now(),
            "notification_id": notification_id,
        },
        conflict_fields=("client_id", "channel", "address"),
    )
    if added:
        logger.info(
            "%s address suppressed for client %s (%s), from notification %s",
            channel,
            client_id,
            reason,
            notification_id,
            extra={"notification_id": str(notification_id or "")},
        )
    return added


def suppression_from_permanent_error(*, notification: Notification, error: PermanentChannelError) -> str:
    """Add the notification's address to the suppression list when its provider's permanent error
    says the address is gone for good (an SMS STOP, an unregistered push token); a push token is
    also dropped from the recipient's stored tokens. Returns the reason, "" for any other error.
    Runs inside the caller's transaction (outcomes.record_permanent_failure)."""
    reason = PERMANENT_ERROR_REASONS.get((notification.channel, str(error.extra.get("provider_code", ""))), "")
    if not reason:
        return ""
    suppression_add(
        client_id=notification.client_id,
        channel=notification.channel,
        address=notification.address,
        reason=reason,
        notification_id=notification.pk,
    )
    if notification.channel == "push":
        _push_token_drop(client_id=notification.client_id, user_id=notification.user_id, token=notification.address)
    return reason


def _push_token_drop(*, client_id: Any, user_id: str, token: str) -> None:
    """Remove a dead device token from the recipient's tokens, so accept stops picking it; the
    row is locked for the read-modify-write, since a PUT of the recipient may run meanwhile."""
    with transaction.atomic():
        recipient = Recipient.objects.select_for_update().filter(client_id=client_id, user_id=user_id).first()
        if recipient is None or token not in (recipient.push_tokens or []):
            return
        recipient.push_tokens = [t for t in recipient.push_tokens if t != token]
        recipient.save(update_fields=["push_tokens", "updated_at"])


def suppression_remove(*, client: ApiClient, address: str, channel: str = "") -> int:
    """Take ``address`` off the client's suppression list (on ``channel`` only, when given), so it
    is sent to again; returns how many were removed, NotFound when none was there."""
    suppressions = suppression_list(client=client, channel=channel, address=address)
    removed, _ = suppressions.delete()
    if not removed:
        raise NotFound(f"no suppression of {address!r}" + (f" on {channel}" if channel else ""))
    logger.info("suppression of a %s address removed for client %s", channel or "any", client.pk)
    return int(removed)


def suppression_delete(*, suppression: Suppression) -> None:
    """Remove one suppression (the admin's delete, which logs who did it)."""
    Suppression.objects.filter(pk=suppression.pk).delete()
