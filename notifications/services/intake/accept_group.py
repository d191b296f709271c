"""Group commit of single accepts: the requests of one client that a web process is accepting at
the same moment are written in one transaction and published in one round trip, as a batch
accept is.

Each ``POST /notifications`` joins its client's group in the process. The first to arrive leads:
it takes every request of that client waiting (its own included), accepts them with one batch (one
read of their recipients, one of their suppressions, one statement for their keys and
notifications, one AMQP commit), hands each its answer, and passes the lead to the first request
of the client that arrived meanwhile. At low load a request finds nobody waiting and is accepted
alone (notification_accept, exactly as without the group, while it leads); under load the
requests that arrive while one group is being written form the next, so the round trips, commits
and broker round trips per request fall as the load rises, and no request waits on a timer.

Groups are per client: a batch is one client's anyway (its keys, its recipients), and a request
never waits on another client's work (a heavy template, a slow cap check). Every wait is bounded
by GROUP_WAIT_SECONDS, for a request already taken into a group as for one still queued: past it,
the request is accepted on its own, which its idempotency key makes safe (the group's write and
its own claim the same key; whichever comes second replays the first).

Nothing changes in what a request is answered: each keeps its idempotency key (the same key twice
in one group: the second replays the first), its validation error, its own trace and request id
(built, logged and published as its request). A request written by the group's statement is
answered from that statement's result, whatever happens after; one not yet answered when the
group fails is accepted alone in its own thread, so only a bad one fails and a database outage
answers 503 to each, as before.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

from opentelemetry import context as otel_context

from ... import metrics
from ...conf import get_config
from ...errors import NotificationError
from ...logging import current_request_id
from ...models import ApiClient
from .accept import NotificationRequest, notification_accept
from .accept_batch import BatchItem, notification_accept_batch_into
from .idempotency import AcceptResult
from .shared_write import notification_accept_shared

logger = logging.getLogger("notifications.services")


# How long a request waits for its group before it is accepted on its own instead: far longer than
# a group takes (milliseconds), only so that a leader stuck on something (a lock another process
# holds, a broker that blocks publishers) cannot hold the client's accepts behind it.
GROUP_WAIT_SECONDS = 10.0


@dataclass(eq=False)
class _Waiting:
    """One request in the group: what it asks, and, once its group ran, its answer."""

    client: ApiClient
    item: BatchItem
    woken: threading.Event = field(default_factory=threading.Event)
    leads: bool = False  # set under the group's lock: it takes the next group
    answer: AcceptResult | NotificationError | None = None
    alone: bool = False  # its group left it unanswered: accept it on its own
    failure: Exception | None = None  # what its accept raised when it was accepted alone while leading


class AcceptGroup:
    """One client's accepts in this process that are waiting to be written, and which leads."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._waiting: list[_Waiting] = []
        self._leading = False

    @property
    def waiting(self) -> int:
        """How many accepts are waiting to be written (the next group)."""
        with self._lock:
            return len(self._waiting)

    def accept(self, *, client: ApiClient, item: BatchItem, size: int) -> AcceptResult:
        waiting = _Waiting(client=client, item=item)
        deadline = time.monotonic() + GROUP_WAIT_SECONDS
        with self._lock:
            self._waiting.append(waiting)
            waiting.leads = not self._leading
            self._leading = True
        if not waiting.leads and not waiting.woken.wait(timeout=max(0.0, deadline - time.monotonic())):
            # Its group is late: queued still, or taken into a group that has not answered. Either
            # way it is accepted on its own; its key keeps the two from writing it twice.
            self._withdraw(waiting)
            logger.warning("an accept waited %.0f s for its group; accepting it on its own", GROUP_WAIT_SECONDS)
            return _accept_alone(waiting)
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

    def _withdraw(self, waiting: _Waiting) -> None:
        """Take a request that waited too long out of the queue, if it is still there; if it was
        given the lead meanwhile, pass the lead on (or drop it) so the queue is not left leaderless."""
        with self._lock:
            self._waiting = [other for other in self._waiting if other is not waiting]
            if not waiting.leads:
                return
            waiting.leads = False
            following = self._waiting[0] if self._waiting else None
            self._leading = following is not None
            if following is not None:
                following.leads = True
        if following is not None:
            following.woken.set()

    def _lead(self, size: int) -> None:
        """Accept every request waiting (up to ``size``, its own first), then pass the lead on."""
        with self._lock:
            group, self._waiting = self._waiting[:size], self._waiting[size:]
        try:
            metrics.record_accept_group(len(group))
            _group_accept(group)
        except Exception:
            unanswered = sum(1 for waiting in group if not isinstance(waiting.answer, AcceptResult))
            logger.exception("a group of %d accepts failed; accepting the %d unanswered one by one", len(group), unanswered)
            for waiting in group:
                if waiting.failure is None and not isinstance(waiting.answer, AcceptResult):
                    waiting.answer = None  # a refusal from before the failure is not final: re-run it
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


class AcceptGroups:
    """This process's groups, one per client, made as a client's first accept arrives."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._by_client: dict[Any, AcceptGroup] = {}

    def of(self, client: ApiClient) -> AcceptGroup:
        found = self._by_client.get(client.pk)
        if found is None:
            with self._lock:
                found = self._by_client.setdefault(client.pk, AcceptGroup())
        return found

    @property
    def waiting(self) -> int:
        """How many accepts, of every client, are waiting to be written."""
        with self._lock:
            groups = list(self._by_client.values())
        return sum(group.waiting for group in groups)


def _accept_alone(waiting: _Waiting) -> AcceptResult:
    """Accept one request on its own, in the calling thread (its own), as without a group."""
    item = waiting.item
    return notification_accept(
        client=waiting.client, request=item.request, idempotency_key=item.idempotency_key, fingerprint=item.fingerprint
    )


def _group_accept(group: list[_Waiting]) -> None:
    """Answer each request of the group (one client's): alone when it is the only one, else as one
    batch whose answers are handed over as the batch settles them."""
    if len(group) == 1:
        # The leader alone (a group's first is its leader, in its own thread): accepted as without
        # a group, its write shared with the other clients' groups writing at the same moment
        # (shared_write.py), and while it still leads, so the requests arriving meanwhile gather
        # into the next group. Were the lead passed on first, each of them would find no leader,
        # lead a group of one in turn, and under load the groups would never form again.
        only = group[0]
        item = only.item
        try:
            only.answer = notification_accept_shared(
                client=only.client, request=item.request, idempotency_key=item.idempotency_key, fingerprint=item.fingerprint
            )
        except NotificationError as exc:
            only.answer = exc
        except Exception as exc:  # the database down, say: raised in its own request, as without a group
            only.failure = exc
        return
    answers: list[AcceptResult | NotificationError | None] = [None] * len(group)
    try:
        notification_accept_batch_into(client=group[0].client, items=[waiting.item for waiting in group], results=answers)
    finally:
        for waiting, answer in zip(group, answers, strict=True):
            waiting.answer = answer


groups = AcceptGroups()  # this process's


def notification_accept_grouped(
    *, client: ApiClient, request: NotificationRequest, idempotency_key: str | None, fingerprint: str
) -> AcceptResult:
    """Accept one notification as notification_accept does, written with the other accepts of its
    client in this process that arrive at the same moment (one transaction, one publish). A digest
    member is accepted alone: it joins its digest under the digest's row lock, which a batch does
    not take. Without an idempotency key it gets a new one, as notification_accept gives it."""
    size = get_config().accept_group_size
    if request.digest is not None or size <= 1:
        return notification_accept(client=client, request=request, idempotency_key=idempotency_key, fingerprint=fingerprint)
    item = BatchItem(
        request=request,
        idempotency_key=idempotency_key or str(uuid.uuid4()),
        fingerprint=fingerprint,
        trace_context=otel_context.get_current(),
        request_id=current_request_id(),
    )
    return groups.of(client).accept(client=client, item=item, size=size)
