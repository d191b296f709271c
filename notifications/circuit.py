"""Circuit breakers of provider accounts, shared by every worker process and host through Redis.

An account's circuit is *closed* (sends go to it), *open* (sends go to the channel's next
account) or, once ``PROVIDER_CIRCUIT_COOLDOWN_SECONDS`` have passed since it opened, *half-open*:
the first caller to ask gets to send one probe through it (a lease in Redis, so one worker among
all of them), and the probe's outcome closes it or opens it for another cooldown. It opens after
``PROVIDER_CIRCUIT_FAILURES`` transient failures in a row, all within
``PROVIDER_CIRCUIT_WINDOW_SECONDS`` of the first; any answer from the provider breaks the row.

Each read or write is one Lua script on Redis' own clock. On the embedded default (no Redis, one
process) the same rules run in memory. When Redis cannot be reached the caller decides (see
services/delivery/failover.py: it fails open to the primary account).
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass

from django.core.cache import cache

from . import metrics
from .conf import CircuitPolicy, get_config, redis_client

logger = logging.getLogger("notifications.circuit")

CLOSED, PROBE, OPEN = "closed", "probe", "open"

# KEYS[1]: the account's state hash (open_until, first_at, failures; ms); KEYS[2]: the probe lease.
# ARGV[1]: the probe lease (ms). Returns 0 closed, 1 half-open and this caller probes, 2 open.
_ALLOW_SCRIPT = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local open_until = tonumber(redis.call('HGET', KEYS[1], 'open_until') or '0')
if open_until == 0 then return 0 end
if now < open_until then return 2 end
if redis.call('SET', KEYS[2], '1', 'NX', 'PX', ARGV[1]) then return 1 end
return 2
"""

# ARGV: ok (1/0), failures to open, window (ms), cooldown (ms), key TTL (ms).
# Returns 0 closed, 1 still open, 2 opened now, 3 closed now (it was open or half-open).
_RECORD_SCRIPT = """
if ARGV[1] == '1' then
  local was_open = redis.call('HEXISTS', KEYS[1], 'open_until')
  redis.call('DEL', KEYS[1], KEYS[2])
  if was_open == 1 then return 3 end
  return 0
end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local open_until = tonumber(redis.call('HGET', KEYS[1], 'open_until') or '0')
if open_until > 0 then
  if now >= open_until then
    redis.call('HSET', KEYS[1], 'open_until', now + tonumber(ARGV[4]))
    redis.call('DEL', KEYS[2])
    redis.call('PEXPIRE', KEYS[1], ARGV[5])
  end
  return 1
end
local first = tonumber(redis.call('HGET', KEYS[1], 'first_at') or '0')
local failures
if first == 0 or now - first > tonumber(ARGV[3]) then
  redis.call('HSET', KEYS[1], 'first_at', now, 'failures', 1)
  failures = 1
else
  failures = redis.call('HINCRBY', KEYS[1], 'failures', 1)
end
redis.call('PEXPIRE', KEYS[1], ARGV[5])
if failures >= tonumber(ARGV[2]) then
  redis.call('HSET', KEYS[1], 'open_until', now + tonumber(ARGV[4]))
  redis.call('HDEL', KEYS[1], 'first_at', 'failures')
  return 2
end
return 0
"""

_ALLOW_ANSWERS = {0: CLOSED, 1: PROBE, 2: OPEN}


def _keys(channel: str, account: str) -> list[str]:
    base = f"circuit:{channel}:{account}"
    return [cache.make_key(base), cache.make_key(f"{base}:probe")]


def _ttl_ms(policy: CircuitPolicy) -> int:
    # Long past a cooldown: a circuit nobody touched for that long is forgotten (closed), not kept.
    return int((policy.window_seconds + policy.cooldown_seconds) * 10_000) + 60_000


def _probe_lease_ms() -> int:
    # A probe whose outcome never comes back (its worker died) frees the half-open circuit after this.
    return int(get_config().provider_timeout_seconds * 1000) + 5_000


@dataclass
class _LocalCircuit:
    open_until: float = 0.0
    first_at: float = 0.0
    failures: int = 0
    probe_until: float = 0.0


class _LocalCircuits:
    """The same rules in one process's memory, for the embedded default."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._circuits: dict[tuple[str, str], _LocalCircuit] = {}

    def allow(self, key: tuple[str, str]) -> str:
        with self._lock:
            circuit, now = self._circuits.get(key), time.monotonic()
            if circuit is None or not circuit.open_until:
                return CLOSED
            if now < circuit.open_until or now < circuit.probe_until:
                return OPEN
            circuit.probe_until = now + _probe_lease_ms() / 1000
            return PROBE

    def record(self, key: tuple[str, str], ok: bool, policy: CircuitPolicy) -> int:
        with self._lock:
            now = time.monotonic()
            if ok:
                circuit = self._circuits.pop(key, None)
                return 3 if circuit is not None and circuit.open_until else 0
            circuit = self._circuits.setdefault(key, _LocalCircuit())
            if circuit.open_until:
                if now >= circuit.open_until:
                    circuit.open_until, circuit.probe_until = now + policy.cooldown_seconds, 0.0
                return 1
            if not circuit.first_at or now - circuit.first_at > policy.window_seconds:
                circuit.first_at, circuit.failures = now, 1
            else:
                circuit.failures += 1
            if circuit.failures >= policy.failures:
                circuit.open_until, circuit.first_at, circuit.failures = now + policy.cooldown_seconds, 0.0, 0
                return 2
            return 0

    def is_open(self, key: tuple[str, str]) -> bool:
        with self._lock:
            circuit = self._circuits.get(key)
            return bool(circuit and circuit.open_until)

    def clear(self) -> None:
        with self._lock:
            self._circuits.clear()


_local = _LocalCircuits()
_script_lock = threading.Lock()
_scripts: dict[str, object] = {}


def _run(name: str, source: str, keys: list[str], args: list[object]) -> int:
    client = redis_client()
    assert client is not None
    with _script_lock:
        if name not in _scripts:
            _scripts[name] = client.register_script(source)
    script = _scripts[name]
    return int(script(keys=keys, args=args, client=client))  # type: ignore[operator]


def circuit_allow(channel: str, account: str) -> str:
    """CLOSED or PROBE: send through this account (PROBE: as the one probe of a half-open
    circuit); OPEN: not now. Raises what Redis raises when it cannot be reached."""
    if redis_client() is None:
        return _local.allow((channel, account))
    return _ALLOW_ANSWERS[_run("allow", _ALLOW_SCRIPT, _keys(channel, account), [_probe_lease_ms()])]


def circuit_record(channel: str, account: str, *, ok: bool) -> None:
    """What a send through the account came to: ``ok`` (the provider answered) or a transient
    failure. Raises what Redis raises when it cannot be reached."""
    policy = get_config().circuit
    if redis_client() is None:
        changed = _local.record((channel, account), ok, policy)
    else:
        args: list[object] = [
            1 if ok else 0,
            policy.failures,
            int(policy.window_seconds * 1000),
            int(policy.cooldown_seconds * 1000),
            _ttl_ms(policy),
        ]
        changed = _run("record", _RECORD_SCRIPT, _keys(channel, account), args)
    if changed == 2:
        logger.warning(
            "the circuit of %s account %s is open: its sends go to the next account for %.0f s",
            channel,
            account,
            policy.cooldown_seconds,
            extra={"channel": channel, "account": account},
        )
    elif changed == 3:
        logger.info(
            "the circuit of %s account %s is closed again", channel, account, extra={"channel": channel, "account": account}
        )
    if changed in (1, 2):
        metrics.record_circuit(channel=channel, account=account, open=True)
    elif ok:
        metrics.record_circuit(channel=channel, account=account, open=False)


def circuit_is_open(channel: str, account: str) -> bool:
    """Whether the account's circuit is open or half-open now (for the admin and the gauge)."""
    if redis_client() is None:
        return _local.is_open((channel, account))
    client = redis_client()
    assert client is not None
    return bool(client.hexists(_keys(channel, account)[0], "open_until"))


def circuit_reset_local() -> None:
    """Forget the in-memory circuits (tests)."""
    _local.clear()
