"""Reads of the suppression list: whether a client may send to an address, one or a batch at a time."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from django.db import connection

from ..connections import prepared_cursor
from ..models import Suppression


def address_suppressed_reason(*, client_id: Any, channel: str, address: str) -> str:
    """Why the client may not send to ``address`` on ``channel`` (a SuppressionReason, which is
    also the notification's ``suppressed_reason``); "" when it may. One unique-index probe."""
    return addresses_suppressed_reasons(client_id=client_id, addresses=[(channel, address)]).get((channel, address), "")


def addresses_suppressed_reasons(*, client_id: Any, addresses: Iterable[tuple[str, str]]) -> dict[tuple[str, str], str]:
    """The suppressed ones of ``addresses`` ((channel, address) pairs) with their reasons, in one
    query on the list's unique index: for a fallback route choosing among a recipient's channels,
    and for a batch of accepts."""
    wanted = set(addresses)
    if not wanted:
        return {}
    channels, matching = {channel for channel, _ in wanted}, {address for _, address in wanted}
    # Raw SQL of three text columns: on a group commit's path the ORM's filter cost more to build
    # than the query took; the list's unique index (client_id, channel, address) answers it.
    sql = (
        f"SELECT channel, address, reason FROM {connection.ops.quote_name(Suppression._meta.db_table)} WHERE client_id = %s "
        f"AND channel IN ({', '.join(['%s'] * len(channels))}) AND address IN ({', '.join(['%s'] * len(matching))})"
    )
    # One address, an accept's own: prepared, as every single accept runs it (connections.prepared_cursor).
    with prepared_cursor() if len(wanted) == 1 else connection.cursor() as cursor:
        cursor.execute(sql, [client_id, *channels, *matching])
        rows = cursor.fetchall()
    return {(channel, address): reason for channel, address, reason in rows if (channel, address) in wanted}
