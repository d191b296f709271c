"""One send of a claimed notification: the provider (failover's account, or test mode's capture
sink) called in its span, a failure classified and recorded at once, a success returned to record
with its chunk (send.py, outcomes.py)."""

from __future__ import annotations

import logging
import time

from ... import tracing
from ...channels import OutgoingMessage
from ...channels.base import Provider
from ...errors import PermanentChannelError, TransientChannelError
from ...models import Claim
from .capture import CaptureSink
from .failover import account_refused, provider_error_is_account_level, provider_for_send, provider_send_record
from .outcomes import DeliveryOutcome, Sent, record_permanent_failure, record_transient_failure

logger = logging.getLogger("notifications.services")


def notification_send(claim: Claim) -> Sent | DeliveryOutcome:
    """Call the provider; a failure is recorded here and now, a success is returned to record."""
    notification, attempt = claim.notification, claim.attempt
    message = OutgoingMessage(
        notification_id=str(notification.pk),
        channel=notification.channel,
        address=notification.address,
        subject=notification.subject,
        body=notification.message,
        metadata=notification.metadata,
        idempotency_key=str(notification.pk),
        client_name=claim.client.name,
        webhook_secret=claim.client.webhook_secret,
        webhook_previous_secrets=claim.client.webhook_previous_secrets,
        html_body=notification.html_message,
        headers=notification.headers,
    )
    # Provider failover: the first account of the channel whose circuit is not open (services/delivery/failover.py);
    # in test mode the capture sink, which has no account and no circuit (services/delivery/capture.py).
    provider: Provider
    if claim.is_test:
        attempt.account, provider = "", CaptureSink(client_id=notification.client_id)
    else:
        attempt.account, provider = provider_for_send(notification.channel)
    started = time.monotonic()
    with tracing.provider_span(notification, attempt.number) as span:
        try:
            result = provider.send(message)
        except PermanentChannelError as exc:
            if exc.code == "not_configured":
                # Missing settings do not appear between two tries: the message fails at once (a
                # route moves on to its next channel now), and with backups the account's circuit
                # counts it, so the next sends go to an account that can send.
                tracing.record_outcome(span, "permanent_error")
                provider_send_record(notification.channel, attempt.account, ok=False)
                return record_permanent_failure(claim, exc, started)
            if provider_error_is_account_level(exc):
                # A revoked token or a refused login is the account's fault, not the recipient's:
                # a failure for the circuit (the next sends go to a backup) and a retry, recorded
                # as the transient error it is for this message (outcome and class agree).
                tracing.record_outcome(span, "transient_error")
                provider_send_record(notification.channel, attempt.account, ok=False)
                return record_transient_failure(claim, account_refused(exc), started)
            tracing.record_outcome(span, "permanent_error")
            provider_send_record(notification.channel, attempt.account, ok=True)  # it answered: the account works
            return record_permanent_failure(claim, exc, started)
        except TransientChannelError as exc:
            tracing.record_outcome(span, "transient_error")
            provider_send_record(notification.channel, attempt.account, ok=False)
            return record_transient_failure(claim, exc, started)
        except Exception as exc:
            # A provider bug is not the recipient's fault: retry it like a transient error.
            logger.exception("provider for %s raised unexpectedly", notification.channel)
            tracing.record_outcome(span, "transient_error")
            provider_send_record(notification.channel, attempt.account, ok=False)
            return record_transient_failure(claim, exc, started)
        tracing.record_outcome(span, "delivered")
    provider_send_record(notification.channel, attempt.account, ok=True)
    return Sent(claim, result, time.monotonic() - started)
