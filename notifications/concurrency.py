"""Per-client webhook concurrency: how many worker threads one client's endpoints may hold at once.

A post to a client's webhook or status webhook first takes one of that client's
``WEBHOOK_CONCURRENCY_PER_CLIENT`` turns and gives it back when the post ends; with none free the
caller does not wait in its thread, it puts the work back for a moment (not an attempt). So a
client whose endpoint is slow holds at most that many threads, and every other client's posts
still find threads free.

With Redis configured the turns are one sorted set per client (members: a token per post, scored
by when the turn expires), taken and given back atomically by every worker process and host. A
turn expires on its own after the post's deadline and a grace, so a worker that dies mid-post
frees it then. On the embedded default, or while Redis cannot be reached, each process keeps the
same count in memory (a bound per process rather than overall: posts are not paused for it).
"""

from __future__ import annotations

import threading
import time
import uuid
from dataclasses import dataclass
from typing import Any

from django.core.cache import cache

from .conf import get_config, redis_client
from .degraded import RedisOutage

# How long after a post's deadline its turn is given back by itself (a worker that died mid-post).
TURN_GRACE_SECONDS = 5.0
# How long work that found no free turn waits before it is tried again.
TURN_WAIT_SECONDS = 1.0

# KEYS[1]: the client's turns. ARGV[1]: how many may be out; ARGV[2]: a turn's expiry (ms);
# ARGV[3]: this turn's token. Returns 1 when the turn is taken, else 0. Redis' own clock, so
# hosts with skewed clocks agree.
_TAKE_SCRIPT = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
if redis.call('ZCARD', KEYS[1]) >= tonumber(ARGV[1]) then
  return 0
end
redis.call('ZADD', KEYS[1], now + tonumber(ARGV[2]), ARGV[3])
redis.call('PEXPIRE', KEYS[1], tonumber(ARGV[2]))
return 1
"""

redis_outage = RedisOutage("webhook_concurrency", consequence="each worker process limits a client's webhook posts on its own")
_script_lock = threading.Lock()
_script: Any = None


class LocalTurns:
    """Turns counted in this process's memory, each until its expiry (monotonic seconds)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._turns: dict[str, dict[str, float]] = {}

    def take(self, key: str, limit: int, expiry: float, token: str) -> bool:
        with self._lock:
            now = time.monotonic()
            turns = {t: until for t, until in self._turns.get(key, {}).items() if until > now}
            taken = len(turns) < limit
            if taken:
                turns[token] = now + expiry
            self._turns[key] = turns
            return taken

    def give_back(self, key: str, token: str) -> None:
        with self._lock:
            turns = self._turns.get(key, {})
            turns.pop(token, None)
            if not turns:  # a key per user (inbox streams): an empty one is not kept
                self._turns.pop(key, None)


_local = LocalTurns()


@dataclass(frozen=True)
class WebhookTurn:
    """One of a client's turns, held for one post; ``release`` gives it back."""

    key: str
    token: str
    in_redis: bool

    def release(self) -> None:
        if not self.in_redis:
            _local.give_back(self.key, self.token)
            return
        client = redis_client()
        if client is None:
            return

        def give_back() -> None:
            client.zrem(self.key, self.token)

        # Not given back (Redis went away meanwhile): it expires by itself.
        redis_outage.call(give_back, fallback=lambda: None, counted=False)


def _key(client_id: Any) -> str:
    return cache.make_key(f"webhook_turns:{client_id}")


def webhook_turn_take(*, client_id: Any) -> WebhookTurn | None:
    """Take one of the client's webhook turns for a post, or None when all are out (come back
    after TURN_WAIT_SECONDS). Status-webhook posts take from the same turns as webhook
    notifications: both are that client's endpoints holding this platform's threads."""
    config = get_config()
    limit = config.webhook_concurrency_per_client
    expiry = config.webhook_timeout_seconds + TURN_GRACE_SECONDS
    key, token = _key(client_id), uuid.uuid4().hex
    client = redis_client()

    def take_locally() -> WebhookTurn | None:
        return WebhookTurn(key, token, in_redis=False) if _local.take(key, limit, expiry, token) else None

    if client is None:
        return take_locally()

    def take() -> WebhookTurn | None:
        global _script
        with _script_lock:
            if _script is None:
                _script = client.register_script(_TAKE_SCRIPT)
        taken = _script(keys=[key], args=[limit, int(expiry * 1000), token], client=client)
        return WebhookTurn(key, token, in_redis=True) if int(taken) else None

    return redis_outage.call(take, fallback=take_locally)
