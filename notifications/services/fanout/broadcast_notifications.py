"""The notifications of a broadcast's batch: one per subscriber, built from the broadcast's
content, consent and caps as an accept builds one, but for a whole page of subscribers at once."""

from __future__ import annotations

import functools
import logging
import uuid
from datetime import datetime
from typing import Any

from ...channels import recipient_address, validate_address
from ...errors import NotificationError, TemplateRenderFailed, ValidationFailed
from ...models import (
    Broadcast,
    Category,
    Notification,
    Recipient,
    Status,
    SuppressedReason,
    TemplateVariant,
)
from ...selectors import (
    suppressed_addresses,
)
from ..intake.accept import NotificationRequest, notification_build
from ..policy.caps import NO_SLOT, CapSlot, recipient_cap_take
from ..policy.consent import consent_at_accept
from ..policy.content import notification_content
from ..policy.templates import template_variants_read

logger = logging.getLogger("notifications.services")


class NotificationBuilder:
    """Builds a broadcast's notification for one subscriber, as an accept would (its stored
    address, its consent, the content in its locale by the accept's own notification_content,
    its recipient's cap) without an accept's per-request reads: the category, the template's
    variants and the suppression list are read once per batch. The cap slots it takes go in
    ``cap_slots``, by notification id, for the batch to give back what it does not write."""

    def __init__(
        self, broadcast: Broadcast, *, subscribers: list[Recipient], now: datetime, cap_slots: dict[Any, CapSlot]
    ) -> None:
        self.broadcast = broadcast
        self.now = now
        self.cap_slots = cap_slots
        self.category: Category = broadcast.category
        self.variants: list[TemplateVariant] | None = None
        self.template_error = self.template_error_code = ""
        self.suppressed: dict[str, str] = {}
        self.addresses: dict[int, str] = {}
        if broadcast.channels:
            return  # routed: each subscriber's notification is built by the single accept's code
        if broadcast.template_key:
            try:
                self.variants = template_variants_read(
                    client=broadcast.client, key=broadcast.template_key, channel=broadcast.channel
                )
            except ValidationFailed as error:  # deleted since the broadcast was accepted
                self.template_error, self.template_error_code = f"{error.code}: {error.message}", error.code[:64]
        self.addresses = {recipient.pk: self._address(recipient) for recipient in subscribers}
        self.suppressed = suppressed_addresses(
            client_id=broadcast.client_id, channel=broadcast.channel, addresses=[a for a in self.addresses.values() if a]
        )

    def build(self, recipient: Recipient) -> Notification:
        broadcast = self.broadcast
        try:
            notification = self._build_routed(recipient) if broadcast.channels else self._build_one(recipient)
        except TemplateRenderFailed:
            raise  # the broadcast's own content: every subscriber's would fail (broadcast_fan_out_batch)
        except NotificationError as error:
            # The broadcast's content was checked when it was accepted; what fails here is one
            # subscriber's (no variant in its locale's fallback, a template edited since): that
            # one notification fails, the broadcast goes on.
            notification = self._notification(
                recipient, status=Status.FAILED, last_error=f"{error.code}: {error.message}", failure_reason=error.code[:64]
            )
        notification.broadcast_id = broadcast.pk
        # One member per (broadcast, subscriber): a batch made again after a crash finds its slot
        # held and neither counts it twice nor throttles it.
        slot = recipient_cap_take(notification=notification, member=f"{broadcast.pk}:{recipient.user_id}")
        if slot is not NO_SLOT:
            self.cap_slots[notification.pk] = slot
        return notification

    def _build_routed(self, recipient: Recipient) -> Notification:
        """A fallback route is planned by the single accept's own build (services/policy/routing.py)."""
        broadcast = self.broadcast
        request = NotificationRequest(
            user_id=recipient.user_id,
            message=broadcast.message,
            subject=broadcast.subject,
            template=broadcast.template_key,
            data=broadcast.data,
            metadata=broadcast.metadata,
            category=self.category.key,
            locale=broadcast.locale,
            priority=broadcast.priority,
            channels=tuple(broadcast.channels),
        )
        notification = notification_build(client=broadcast.client, request=request, idempotency_key="")
        notification.category = self.category  # the broadcast's, even if the client shadows its key since
        notification.updated_at = self.now  # auto_now is save()'s; these rows are inserted in bulk
        return notification

    def _build_one(self, recipient: Recipient) -> Notification:
        broadcast, channel = self.broadcast, self.broadcast.channel
        address = self.addresses[recipient.pk]
        if not address:
            return self._notification(recipient, status=Status.SUPPRESSED, suppressed_reason=SuppressedReason.NO_ADDRESS)
        # The preferences and quiet hours as at accept; then the suppression list, read for the batch.
        consent = consent_at_accept(category=self.category, recipient=recipient, channel=channel, due_at=self.now)
        reason = consent.suppressed_reason or self.suppressed.get(address, "")
        if reason:
            return self._notification(recipient, address=address, status=Status.SUPPRESSED, suppressed_reason=reason)
        if self.template_error:
            return self._notification(
                recipient,
                address=address,
                status=Status.FAILED,
                last_error=self.template_error,
                failure_reason=self.template_error_code,
            )
        content = notification_content(
            client=broadcast.client,
            recipient=recipient,
            category=self.category,
            user_id=recipient.user_id,
            channel=channel,
            message=broadcast.message,
            subject=broadcast.subject,
            template=broadcast.template_key,
            data=broadcast.data,
            locale=broadcast.locale,
            variants=self.variants,
        )
        return self._notification(
            recipient,
            address=address,
            status=Status.ACCEPTED,
            next_attempt_at=consent.hold_until or self.now,
            **content.notification_fields(),
        )

    def _address(self, recipient: Recipient) -> str:
        """The subscriber's stored address on the broadcast's channel, normalised; "" for none or a bad one."""
        channel = self.broadcast.channel
        stored = recipient_address(recipient, channel, user_id=recipient.user_id)
        try:
            return validate_address(channel, stored, field="to") if stored else ""
        except ValidationFailed:
            return ""

    def _notification(self, recipient: Recipient, **fields: Any) -> Notification:
        broadcast = self.broadcast
        values: dict[str, Any] = {
            **self._defaults,
            "id": uuid.uuid4(),
            "user_id": recipient.user_id,
            "next_attempt_at": self.now,
            **fields,
        }
        # Positional: Model.__init__ with keywords walks every field for each one, a third of a
        # batch's time in Python at 500 rows.
        notification = Notification(*[values[attname] for attname in _ATTNAMES])  # type: ignore[misc]
        # Cached, so status events know the client's URL and the cap its category, unread.
        notification.client = broadcast.client
        notification.category = self.category
        return notification

    @functools.cached_property
    def _defaults(self) -> dict[str, Any]:
        """What every notification of the batch starts from: the model's defaults, the broadcast's."""
        broadcast = self.broadcast
        return {
            **{field.attname: field.get_default() for field in Notification._meta.concrete_fields},
            "client_id": broadcast.client_id,
            "channel": broadcast.channel,
            "address": "",
            "subject": broadcast.subject,
            "message": broadcast.message,
            "category_id": self.category.pk,
            "metadata": broadcast.metadata,
            "priority": broadcast.priority,
            "created_at": self.now,
            "updated_at": self.now,
        }


_ATTNAMES = [field.attname for field in Notification._meta.concrete_fields]
