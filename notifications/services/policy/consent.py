"""Consent: send, hold to the end of quiet hours, or suppress. Decided at accept (the answer and the
API say which at once) by ``consent_at_accept``; decided again just before the claim by
delivery/withhold.py with the same ``consent_decide``, since a preference may change in between (a
one-click unsubscribe) and a retry may fall in quiet hours."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from ...channels import channel_spec
from ...models import Category, Recipient
from ...selectors import address_suppressed_reason
from .preferences import suppressed_reason
from .quiet_hours import quiet_hours_end


@dataclass(frozen=True)
class Consent:
    suppressed_reason: str = ""  # set: not sent, ever
    hold_until: datetime | None = None  # set: not before then (the end of quiet hours)


def consent_decide(
    *,
    category: Category,
    channel: str,
    preferences: dict[str, Any],
    quiet_hours: dict[str, str] | None,
    timezone: str,
    due_at: datetime,
) -> Consent:
    """Whether a notification of ``category`` on ``channel`` due at ``due_at`` may go: suppressed
    by the preferences, held by quiet hours, or neither. Critical categories are neither."""
    reason = suppressed_reason(category=category, channel=channel, preferences=preferences)
    if reason:
        return Consent(suppressed_reason=reason)
    if category.critical or channel_spec(channel).silent:
        return Consent()  # a silent channel (in_app) makes no sound: quiet hours do not hold it
    return Consent(hold_until=quiet_hours_end(at=due_at, quiet_hours=quiet_hours, timezone=timezone))


def consent_at_accept(
    *,
    category: Category,
    recipient: Recipient | None,
    channel: str,
    due_at: datetime,
    client_id: Any = None,
    address: str = "",
    suppressions: Mapping[tuple[str, str], str] | None = None,
) -> Consent:
    """Consent at accept; with ``client_id`` and ``address``, also the client's suppression list
    (one index probe, made only when the preferences allow the send), or, for a batch that read
    the suppressed ones of its addresses at once, ``suppressions`` ((channel, address) -> reason)."""
    consent = consent_decide(
        category=category,
        channel=channel,
        preferences=recipient.preferences if recipient else {},
        quiet_hours=recipient.quiet_hours if recipient else None,
        timezone=recipient.timezone if recipient else "",
        due_at=due_at,
    )
    if consent.suppressed_reason or client_id is None or not address:
        return consent
    # Whatever the category, critical included: the provider reported the address gone or its
    # owner unwilling, and sending again would only bounce or hurt the sender's reputation.
    if suppressions is not None:
        reason = suppressions.get((channel, address), "")
    else:
        reason = address_suppressed_reason(client_id=client_id, channel=channel, address=address)
    return Consent(suppressed_reason=reason) if reason else consent
