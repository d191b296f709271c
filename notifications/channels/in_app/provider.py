"""The in_app channel: delivering is putting an item in the recipient's inbox (models/inbox.py).

Its address is the recipient's user_id. The item is made once per notification (a retry after a
failed record finds the one already made), with its user's counters and live events in the same
transaction (inbox/store.py).
"""

from __future__ import annotations

from ...inbox.store import inbox_item_deliver
from ...models import Notification
from ..base import OutgoingMessage, PermanentChannelError, SendResult


class InAppProvider:
    def send(self, message: OutgoingMessage) -> SendResult:
        notification = (
            Notification.objects.filter(pk=message.notification_id)
            .select_related("category")
            .only("id", "client_id", "user_id", "created_at", "action_url", "thread_key", "metadata", "category__key")
            .first()
        )
        if notification is None:  # pragma: no cover - a claimed notification is not deleted
            raise PermanentChannelError("the notification is gone")
        item, _ = inbox_item_deliver(
            values={
                "client_id": notification.client_id,
                "user_id": notification.user_id,
                "notification_id": notification.pk,
                "title": message.subject,
                "body": message.body,
                "action_url": notification.action_url,
                "category": notification.category.key if notification.category else "",
                "thread_key": notification.thread_key,
                "data": message.metadata,
            }
        )
        return SendResult(provider_message_id=str(item.pk), response_summary="in inbox")
