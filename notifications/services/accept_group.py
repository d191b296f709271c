"""Group commit of single accepts: the requests a web process is accepting at the same moment are
written in one transaction and published in one round trip, as a batch accept is.

Each ``POST /notifications`` joins the process's group. The first to arrive leads: it takes every
request waiting (its own included), accepts them with notification_accept_batch (one read of their
recipients, one of their suppressions, one statement for their keys and notifications, one AMQP
commit), hands each its answer, and passes the lead to the first request that arrived meanwhile.
At low load a request finds nobody waiting and is accepted alone (notification_accept, exactly as
without the group, while it leads); under load the requests that arrive while one group is being
written form the next, so the round trips, commits and broker round trips per request fall as the
load rises, and no request waits on a timer.

Nothing changes in what a request is answered: each keeps its idempotency key (the same key twice
in one group: the second replays the first), its validation error, its own trace (built and
published under its request's span). If the group's write fails as a whole, every request of it is
accepted alone in its own thread, so only a bad one fails and a database outage answers 503 to
each, as before.
"""

from __future__ import annotations

import logging
import threading
import uuid
from dataclasses import dataclass, field
from typing import Any

from opentelemetry import context as otel_context

from .. import metrics
from ..conf import get_config
from ..errors import NotificationError
from ..models import ApiClient
from .accept import AcceptResult, NotificationRequest, notification_accept
from .accept_batch import BatchItem, notification_accept_batch

logger = logging.getLogger("notifications.services")


# How long a request waits for its group before it is accepted on its own instead: far longer than
# a group takes (milliseconds), only so that a leader stuck on something (a lock another process
# holds, a broker that blocks publishers) cannot hold every accept of the process behind it.
GROUP_WAIT_SECONDS = 10.0


@dataclass(eq=False)
class _Waiting:
    """One request in the group: what it asks, and, once its group ran, its answer."""

    client: ApiClient
    item: BatchItem
    woken: threading.Event = field(default_factory=threading.Event)
    leads: bool = False  # set under the group's lock: it takes the next group
    answer: AcceptResult | NotificationError | None = None
    alone: bool = False  # its group's write failed as a whole: accept it on its own
    failure: Exception | None = None  # what its accept raised when it was accepted alone while leading


class AcceptGroup:
    """The accepts of one process that are waiting to be written, and which of them leads."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._waiting: list[_Waiting] = []
        self._leading = False

    @property
    def waiting(self) -> int:
        """How many accepts are waiting to be written (the next group)."""
        with self._lock:
            return len(self._waiting)

    def accept(
        self, *, client: ApiClient, request: NotificationRequest, idempotency_key: str, fingerprint: str, size: int
    ) -> AcceptResult:
        item = BatchItem(
            request=request, idempotency_key=idempotency_key, fingerprint=fingerprint, trace_context=otel_context.get_current()
        )
        waiting = _Waiting(client=client, item=item)
        with self._lock:
            self._waiting.append(waiting)
            waiting.leads = not self._leading
            self._leading = True
        if not waiting.leads:
            if not waiting.woken.wait(timeout=GROUP_WAIT_SECONDS) and self._withdraw(waiting):
                logger.warning("an accept waited %.0f s for its group; accepting it on its own", GROUP_WAIT_SECONDS)
                return _accept_alone(waiting)
            waiting.woken.wait()  # set already, or it is in a group under way, which always ends by waking it
        if waiting.leads:
            self._lead(size)
        if waiting.failure is not None:
            raise waiting.failure
        if waiting.alone:
            return _accept_alone(waiting)
        if isinstance(waiting.answer, NotificationError):
            raise waiting.answer
        assert waiting.answer is not None
        return waiting.answer

    def _withdraw(self, waiting: _Waiting) -> bool:
        """Take a request that waited too long out of the queue; False when it can no longer be
        (a group took it, or it was just given the lead)."""
        with self._lock:
            if waiting.leads or not any(other is waiting for other in self._waiting):
                return False
            self._waiting = [other for other in self._waiting if other is not waiting]
            return True

    def _lead(self, size: int) -> None:
        """Accept every request waiting (up to ``size``, its own first), then pass the lead on."""
        with self._lock:
            group, self._waiting = self._waiting[:size], self._waiting[size:]
        try:
            metrics.record_accept_group(len(group))
            _group_accept(group)
        except Exception:
            logger.exception("a group of %d accepts failed as a whole; accepting them one by one", len(group))
        finally:
            for waiting in group:
                if waiting.answer is None and waiting.failure is None:
                    waiting.alone = True
                waiting.leads = False
            with self._lock:
                following = self._waiting[0] if self._waiting else None
                self._leading = following is not None
                if following is not None:
                    following.leads = True
            for waiting in group:
                waiting.woken.set()
            if following is not None:
                following.woken.set()  # it leads the next group


def _accept_alone(waiting: _Waiting) -> AcceptResult:
    """Accept one request on its own, in the calling thread (its own), as without a group."""
    item = waiting.item
    return notification_accept(
        client=waiting.client, request=item.request, idempotency_key=item.idempotency_key, fingerprint=item.fingerprint
    )


def _group_accept(group: list[_Waiting]) -> None:
    """Answer each request of the group: alone when it is the only one, else in one batch per client."""
    if len(group) == 1:
        # The leader alone (a group's first is its leader): accepted exactly as without a group,
        # but while it still leads, so the requests arriving meanwhile gather into the next group.
        # Were the lead passed on first, each of them would find no leader, lead a group of one
        # in turn, and under load the groups would never form again.
        only = group[0]
        try:
            only.answer = _accept_alone(only)
        except NotificationError as exc:
            only.answer = exc
        except Exception as exc:  # the database down, say: raised in its own request, as without a group
            only.failure = exc
        return
    by_client: dict[Any, list[_Waiting]] = {}
    for waiting in group:
        by_client.setdefault(waiting.client.pk, []).append(waiting)
    for members in by_client.values():
        if len(members) == 1:
            continue
        answers = notification_accept_batch(client=members[0].client, items=[waiting.item for waiting in members])
        for waiting, answer in zip(members, answers, strict=True):
            waiting.answer = answer


group = AcceptGroup()  # this process's


def notification_accept_grouped(
    *, client: ApiClient, request: NotificationRequest, idempotency_key: str | None, fingerprint: str
) -> AcceptResult:
    """Accept one notification as notification_accept does, written with the other accepts of this
    process that arrive at the same moment (one transaction, one publish). A digest member is
    accepted alone: it joins its digest under the digest's row lock, which a batch does not take.
    Without an idempotency key it gets a new one, as notification_accept gives it."""
    size = get_config().accept_group_size
    if request.digest is not None or size <= 1:
        return notification_accept(client=client, request=request, idempotency_key=idempotency_key, fingerprint=fingerprint)
    key = idempotency_key or str(uuid.uuid4())
    return group.accept(client=client, request=request, idempotency_key=key, fingerprint=fingerprint, size=size)
