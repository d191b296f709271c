"""Slots of live inbox streams: how many one user, one client's users and one process hold open.

A stream takes a slot before it sends anything and gives it back when it ends; with none free it
is refused (429). The user's and the client's slots are held in Redis across every web process,
as the webhook turns are (concurrency.py): one sorted set per user and per client, members a
token per stream scored by when its lease runs out, taken atomically by one script. An open
stream's lease is renewed by its process (every LEASE_SECONDS / 3, all of them in one pipeline),
so a process that dies frees its streams' slots within LEASE_SECONDS. The process's own cap is a count in memory (it is the process's
memory and file descriptors it guards). On the embedded default (no Redis), or while Redis
cannot be reached, the user's and client's slots are counted the same way in the process.
"""

from __future__ import annotations

import collections
import math
import threading
import uuid
from dataclasses import dataclass, field
from typing import Any

from ..concurrency import LocalTurns
from ..conf import get_config
from ..connections import redis_client, redis_key_prefix
from ..degraded import RedisOutage

# How long a slot is held without a renewal: a dead process's streams are free again after it.
LEASE_SECONDS = 60.0
# How often a process renews the leases of its open streams (all at once, one pipeline): three
# chances before they run out.
RENEW_EVERY_SECONDS = LEASE_SECONDS / 3

# KEYS: the user's slots, the client's. ARGV[1], ARGV[2]: how many each may hold; ARGV[3]: the
# lease (ms); ARGV[4]: this stream's token. 1 when taken; else 0. Redis' clock, as the turns'.
_TAKE_SCRIPT = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
for i = 1, 2 do
  redis.call('ZREMRANGEBYSCORE', KEYS[i], '-inf', now)
  if redis.call('ZCARD', KEYS[i]) >= tonumber(ARGV[i]) then
    return 0
  end
end
for i = 1, 2 do
  redis.call('ZADD', KEYS[i], now + tonumber(ARGV[3]), ARGV[4])
  redis.call('PEXPIRE', KEYS[i], tonumber(ARGV[3]))
end
return 1
"""

# KEYS: the user's slots, the client's. ARGV[1]: the lease (ms); ARGV[2]: the token. Renews the
# lease of a slot still held (XX: one that expired is not taken again behind the caps' back).
_RENEW_SCRIPT = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
for i = 1, 2 do
  redis.call('ZADD', KEYS[i], 'XX', now + tonumber(ARGV[1]), ARGV[2])
  redis.call('PEXPIRE', KEYS[i], tonumber(ARGV[1]))
end
return 1
"""

redis_outage = RedisOutage("inbox_stream_slots", consequence="each web process caps a user's and a client's streams on its own")
_scripts_lock = threading.Lock()
_scripts: dict[str, Any] = {}
_local = LocalTurns()


_held_lock = threading.Lock()
_held: dict[str, StreamSlot] = {}  # this process's slots held in Redis, by token, for renewal


def stream_slots_renew() -> int:
    """Renew the leases of every slot this process holds in Redis (one pipeline); how many."""
    with _held_lock:
        slots = list(_held.values())
    client = redis_client()
    if not slots or client is None:
        return 0
    script = _script(client, _RENEW_SCRIPT)

    def renew() -> None:
        pipeline = client.pipeline(transaction=False)
        for slot in slots:
            script(keys=list(slot.keys), args=[int(LEASE_SECONDS * 1000), slot.token], client=pipeline)
        pipeline.execute()

    redis_outage.call(renew, fallback=lambda: None, counted=False)
    return len(slots)


class _ProcessCount:
    """The streams this process holds, in all and by client: one client may hold at most half of
    them (CLIENT_SHARE), so a client minting tokens for many users cannot fill a process that
    serves every client."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.held = 0
        self.by_client: collections.Counter[Any] = collections.Counter()

    def take(self, limit: int, *, client_id: Any) -> bool:
        with self._lock:
            if self.held >= limit or self.by_client[client_id] >= max(1, int(limit * CLIENT_SHARE)):
                return False
            self.held += 1
            self.by_client[client_id] += 1
            return True

    def give_back(self, client_id: Any) -> None:
        with self._lock:
            self.held = max(0, self.held - 1)
            self.by_client[client_id] -= 1
            if self.by_client[client_id] <= 0:
                del self.by_client[client_id]


# The part of a process's streams (INBOX_STREAMS_PER_PROCESS) one client may hold.
CLIENT_SHARE = 0.5
process_streams = _ProcessCount()


def user_slots_key(client_id: Any, user_id: str) -> str:
    return f"{redis_key_prefix()}:inbox:slots:user:{client_id}:{user_id}"


def client_slots_key(client_id: Any) -> str:
    return f"{redis_key_prefix()}:inbox:slots:client:{client_id}"


def _script(client: Any, source: str) -> Any:
    with _scripts_lock:
        if source not in _scripts:
            _scripts[source] = client.register_script(source)
        return _scripts[source]


@dataclass(slots=True)
class StreamSlot:
    """One stream's slot under each cap; ``release`` gives them back (once, however often called)."""

    keys: tuple[str, str]
    token: str
    in_redis: bool
    released: bool = False
    client_id: Any = None
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def release(self) -> None:
        with self._lock:  # the stream's end and its guard may both give it back, from two threads
            if self.released:
                return
            self.released = True
        process_streams.give_back(self.client_id)
        with _held_lock:
            _held.pop(self.token, None)
        if not self.in_redis:
            for key in self.keys:
                _local.give_back(key, self.token)
            return
        client = redis_client()
        if client is None:
            return

        def give_back() -> None:
            pipeline = client.pipeline(transaction=False)
            for key in self.keys:
                pipeline.zrem(key, self.token)
            pipeline.execute()

        # Not given back (Redis went away meanwhile): the lease runs out by itself.
        redis_outage.call(give_back, fallback=lambda: None, counted=False)


def stream_slot_take(*, client_id: Any, user_id: str) -> StreamSlot | None:
    """A slot for a new stream of ``user_id`` of the client, or None when the user, the client or
    this process holds all it may (INBOX_STREAMS_PER_USER, _PER_CLIENT, _PER_PROCESS)."""
    options = get_config().inbox
    if not process_streams.take(options.streams_per_process, client_id=client_id):
        return None
    keys = (user_slots_key(client_id, user_id), client_slots_key(client_id))
    token = uuid.uuid4().hex
    limits = (options.streams_per_user, options.streams_per_client)

    def take_locally() -> StreamSlot | None:
        taken: list[str] = []
        for key, limit in zip(keys, limits, strict=True):
            # No lease in memory: a process's own streams give theirs back when they end, and
            # its count dies with it.
            if not _local.take(key, limit, math.inf, token):
                for held in taken:
                    _local.give_back(held, token)
                return None
            taken.append(key)
        return StreamSlot(keys, token, in_redis=False, client_id=client_id)

    def take() -> StreamSlot | None:
        taken = _script(client, _TAKE_SCRIPT)(keys=list(keys), args=[*limits, int(LEASE_SECONDS * 1000), token], client=client)
        if not int(taken):
            return None
        slot = StreamSlot(keys, token, in_redis=True, client_id=client_id)
        with _held_lock:
            _held[token] = slot
        return slot

    client = redis_client()
    slot = take_locally() if client is None else redis_outage.call(take, fallback=take_locally)
    if slot is None:
        process_streams.give_back(client_id)
    return slot
