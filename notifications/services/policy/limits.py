"""Per-client limits: each is a setting (its default) that an API client's own value overrides
(admin), checked where the thing it bounds is added, and refused there naming the limit.

The client's own value is read with the row lock its check takes (not from the authenticated
client object, which a web process may have kept for API_TOKEN_CACHE_SECONDS), so an admin's
change applies to the next request."""

from __future__ import annotations

import math
from datetime import datetime, timedelta

from ...conf import get_config
from ...errors import LimitExceeded, RateLimitExceeded
from ...models import ApiClient, Broadcast

BROADCAST_WINDOW = timedelta(hours=1)


def topic_subscribers_check(*, own_limit: int | None, subscribers: int) -> None:
    """Refuse a topic that would have ``subscribers`` past its client's limit (400,
    limit_exceeded): ``own_limit``, the client's own, else TOPIC_SUBSCRIBERS_MAX."""
    limit = get_config().topic_subscribers_max if own_limit is None else own_limit
    if subscribers > limit:
        raise LimitExceeded(
            f"a topic of this client may have at most {limit} subscribers; this would make it {subscribers}",
            extra={"field": "user_ids", "limit": "TOPIC_SUBSCRIBERS_MAX", "value": limit},
        )


def broadcast_start_check(*, client: ApiClient, own_limit: int | None, now: datetime) -> None:
    """Refuse a broadcast past the client's limit of broadcasts in the hour before ``now`` (429,
    with when the oldest of them leaves the hour): ``own_limit``, the client's own, else
    BROADCASTS_PER_HOUR_MAX. Call it holding the client's row lock, so two requests of the client
    never both take the last one."""
    limit = get_config().broadcasts_per_hour_max if own_limit is None else own_limit
    started = list(
        Broadcast.objects.filter(client=client, created_at__gt=now - BROADCAST_WINDOW)
        .order_by("-created_at")
        .values_list("created_at", flat=True)[:limit]
    )
    if len(started) < limit:
        return
    # The limit-th newest leaves the hour first among those that keep the client at its limit.
    retry_after = max(1, math.ceil((started[-1] + BROADCAST_WINDOW - now).total_seconds()))
    raise RateLimitExceeded(
        f"this client may start at most {limit} broadcasts an hour; try again in {retry_after} s",
        retry_after=retry_after,
        extra={"limit": "BROADCASTS_PER_HOUR_MAX", "value": limit},
    )
