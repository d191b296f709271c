"""Bearer-token authentication of API clients, their permission and their throttles."""

from __future__ import annotations

import contextlib
from typing import Any

from django.core.cache import cache
from drf_spectacular.extensions import OpenApiAuthenticationExtension
from rest_framework import authentication, exceptions, permissions, throttling
from rest_framework.request import Request

from ..conf import get_config, redis_client
from ..degraded import RedisOutage
from ..models import ApiClient, hash_token
from ..token_cache import active_tokens, known_tokens
from .window_blocks import block_for, window_blocks

# Where ApiClientRateThrottle.count_known leaves its decision on the client's window, with the
# window (ApiClientRateThrottle.window): (window, allowed).
COUNTED_ATTRIBUTE = "_api_client_window_counted"

# A block of ARGV[2] slots of a client's current window (KEYS[1], added, expiring after ARGV[1] s)
# in one command: one EVALSHA costs the web less than a pipeline of two commands, whose packing and
# parsing were most of it.
_WINDOW_BLOCK_SCRIPT = """
local block = tonumber(ARGV[2])
local count = redis.call('INCRBY', KEYS[1], block)
if count == block then redis.call('EXPIRE', KEYS[1], ARGV[1]) end
return count
"""
_script: Any = None


def _window_block_script(redis: Any) -> Any:
    """The script (it loads itself on Redis on first use, and is called with the thread's client):
    one per process, not one per Redis client object, of which there is one per thread."""
    global _script
    if _script is None:
        _script = redis.register_script(_WINDOW_BLOCK_SCRIPT)
    return _script


class ApiClientTokenAuthentication(authentication.BaseAuthentication):
    """``Authorization: Bearer <token>`` (or ``Token <token>``); tokens are compared by hash."""

    keywords = ("bearer", "token")

    def authenticate(self, request: Request) -> tuple[ApiClient, str] | None:
        header = authentication.get_authorization_header(request).decode("latin-1").split()
        if not header or header[0].lower() not in self.keywords:
            return None
        if len(header) != 2:
            raise exceptions.AuthenticationFailed("the Authorization header must be 'Bearer <token>'")
        token_hash, failures = hash_token(header[1]), FailedAuthenticationThrottle()
        known = known_tokens.get(token_hash, max_age=get_config().api_token_cache_seconds)
        if known is not None:
            # Seen valid moments ago (token_cache.py): no read, no failure slot, and served whatever
            # its address's failures: past them only guesses are refused, never a good token.
            ApiClientRateThrottle().count_known(request, client=known)
            return known, header[1]
        # Taken before the token is looked at, so a burst of concurrent guesses cannot all be tried.
        # Past the address's limit only a token of an active client is read from PostgreSQL (known
        # from the hashes this process holds): a guess is refused with no query.
        locked_out = not failures.allow_request(request, None)
        if locked_out and not active_tokens.contains(token_hash):
            raise exceptions.Throttled(failures.wait())
        failed = False
        generation = known_tokens.generation  # before the read: a change after it is not remembered
        try:
            client = ApiClient.objects.filter(token_hash=token_hash).first()
            if client is None or not client.is_active:
                failed = True
                if locked_out:  # revoked since the hashes were read: it learns no more than a guess
                    raise exceptions.Throttled(failures.wait())
                raise exceptions.AuthenticationFailed("invalid or revoked token")
        finally:
            if not failed:  # a good token, or an error not of the client's making (the database down)
                failures.give_back()
        known_tokens.remember(token_hash, client, generation=generation)
        return client, header[1]

    def authenticate_header(self, request: Request) -> str:
        return 'Bearer realm="api"'


class ApiClientTokenScheme(OpenApiAuthenticationExtension):  # type: ignore[no-untyped-call]
    target_class = ApiClientTokenAuthentication
    name = "bearerAuth"

    def get_security_definition(self, auto_schema: Any) -> dict[str, str]:
        return {"type": "http", "scheme": "bearer"}


class IsApiClient(permissions.BasePermission):
    def has_permission(self, request: Request, view: Any) -> bool:
        return isinstance(request.user, ApiClient)


class IsTestToken(permissions.BasePermission):
    """Test mode only (captured messages): a live token is answered 403."""

    message = "only a test token (ntf_test_...) has captured messages; a live token's messages are sent"

    def has_permission(self, request: Request, view: Any) -> bool:
        return isinstance(request.user, ApiClient) and request.user.is_test


class LiveTokenWrites(permissions.BasePermission):
    """Templates and categories are shared by a client's live and test modes (read by both): only
    the live token changes them, so trying something in test mode never changes what live sends."""

    message = "templates and categories are shared with live mode: change them with the live token"

    def has_permission(self, request: Request, view: Any) -> bool:
        return isinstance(request.user, ApiClient) and (request.method in permissions.SAFE_METHODS or not request.user.is_test)


class ApiClientRateThrottle(throttling.SimpleRateThrottle):
    """Requests per API client, counted in the shared cache so every web process agrees.

    A fixed window (its number in the key) counted with one INCR and its expiry in one Redis
    round trip, instead of DRF's sliding history: at the default 6000/min that history is a list
    of up to 6000 timestamps read and written back whole on every request. Fails open: with Redis
    down the request goes on uncounted (and is counted as degraded), since PostgreSQL, not Redis,
    is what accepting a notification needs. On the embedded default (no Redis) DRF's own
    history in the local-memory cache counts.
    """

    scope = "api_client"
    outage = RedisOutage("throttle", consequence="API requests are not throttled")
    num_requests: int  # set from the rate by SimpleRateThrottle.__init__
    duration: int

    def allow_request(self, request: Request, view: Any) -> bool:
        counted = getattr(request, COUNTED_ATTRIBUTE, None)
        if counted is not None and self.rate is not None:
            self.now = self.timer()
            if counted[0] == self.window(request.user.pk, self.now):
                self._fixed_window = True
                return bool(counted[1])  # counted by the authentication (count_known)
        redis = redis_client()
        if redis is None:
            return bool(super().allow_request(request, view))
        key = self.get_cache_key(request, view)
        if key is None or self.rate is None:
            return True
        self.now = self.timer()
        self._fixed_window = True

        def count() -> bool:
            pipeline = redis.pipeline(transaction=False)
            self.count_queue(pipeline, client_pk=request.user.pk, now=self.now)
            return int(pipeline.execute()[0]) <= self.num_requests

        return self.outage.call(count, fallback=lambda: True)

    def count_known(self, request: Request, *, client: ApiClient) -> None:
        """Count the request of a token known good (token_cache.py) and leave the decision on the
        request (COUNTED_ATTRIBUTE) for ``allow_request``: usually a slot of a block this process
        holds, with no Redis call, else one round trip that fetches the next block
        (window_blocks.py). On the embedded default (no Redis) ``allow_request`` counts it."""
        redis = redis_client()
        if redis is None or self.rate is None:
            return
        self.now = self.timer()
        counted = self.window(client.pk, self.now)
        # By Redis server and key prefix, and by the window and rate: a block taken under another
        # rate is not handed out under this one. Not by the Redis client or its pool, which are
        # objects of a thread (django-redis makes a client per thread, and threads that start
        # together can each make a pool), nor by the Redis key, made only when Redis is called.
        server = redis.connection_pool.connection_kwargs
        window = (server.get("host"), server.get("port"), server.get("path"), server.get("db"), cache.key_prefix, counted)
        block = window_blocks.claim(window, block_for(self.num_requests))
        if block == 0:
            setattr(request, COUNTED_ATTRIBUTE, (counted, True))
            return
        key = self.window_key(client.pk, self.now)

        def fetch() -> None:
            count: int | None = None  # the shared count after this block; None: nothing was added
            try:
                count = int(_window_block_script(redis)(keys=[key], args=[self.duration + 1, block], client=redis))
            finally:  # also when the script failed: the block is no longer being fetched
                allowed = window_blocks.fetched(window, block=block, count=count, rate=self.num_requests)
            setattr(request, COUNTED_ATTRIBUTE, (counted, allowed))

        # Fails open as allow_request does, and is counted as degraded once for the request.
        self.outage.call(fetch, fallback=lambda: setattr(request, COUNTED_ATTRIBUTE, (counted, True)))

    def window(self, client_pk: Any, now: float) -> tuple[Any, int, int, int]:
        """Which window of the client's ``now`` is in, at this rate."""
        return client_pk, self.num_requests, self.duration, int(now // self.duration)

    def window_key(self, client_pk: Any, now: float) -> str:
        """The cache key counting the client's requests in the window of ``now``."""
        number = self.window(client_pk, now)[-1]
        return cache.make_key(f"{self.cache_format % {'scope': self.scope, 'ident': client_pk}}:{number}")

    def count_queue(self, pipeline: Any, *, client_pk: Any, now: float) -> str:
        """Queue the count of one request on ``pipeline`` (its first result is the new count)."""
        key = self.window_key(client_pk, now)
        pipeline.incr(key)
        pipeline.expire(key, self.duration + 1)
        return key

    def wait(self) -> float | None:
        if getattr(self, "_fixed_window", False):
            return self.duration - (self.now % self.duration)
        return super().wait()

    def get_cache_key(self, request: Request, view: Any) -> str | None:
        if not isinstance(request.user, ApiClient):
            return None
        return self.cache_format % {"scope": self.scope, "ident": request.user.pk}


class FailedAuthenticationThrottle(throttling.SimpleRateThrottle):
    """Failed token authentications per client address (``API_AUTH_FAILURE_RATE``), counted in the
    shared cache so every web process agrees; past the limit the address's guesses are answered
    429 without a query, while a good token from it is still served (ApiClientTokenAuthentication):
    behind a proxy not counted in ``API_NUM_PROXIES`` every client shares the proxy's address, and
    one stranger's bad token must not lock them all out.

    Every token authentication takes a slot of its address's window with one atomic INCR before
    the token is looked up, and a success gives it back: what stays counted is the failures (and
    the attempts in flight). Checking a count first and adding failures after would let a burst of
    concurrent guesses all read "no failures yet" and all be tried. Windows are fixed (their
    number is in the key), so the count needs no list and expires with its window.

    The address is DRF's ``get_ident``: the connection's peer, or with ``NUM_PROXIES`` set the
    entry that many hops back in X-Forwarded-For, never a header the client alone writes. Fails
    open when Redis is down, as the API's throttle does.
    """

    scope = "failed_authentication"
    num_requests: int  # set from the rate by SimpleRateThrottle.__init__
    duration: int
    outage = RedisOutage("auth_throttle", consequence="failed token authentications are not counted")

    def get_rate(self) -> str:
        return get_config().api_auth_failure_rate

    def get_cache_key(self, request: Request, view: Any) -> str:
        window = int(self.now // self.duration)
        return self.cache_format % {"scope": self.scope, "ident": f"{self.get_ident(request)}:{window}"}

    def allow_request(self, request: Request, view: Any) -> bool:
        """Take a slot; False when the address has used up its window."""
        self.now = self.timer()
        self.key = self.get_cache_key(request, view)
        self._taken = False

        def take() -> bool:
            try:
                count = self.cache.incr(self.key)
            except ValueError:  # the window's first attempt; add is SET NX, so one of a race wins
                count = 1 if self.cache.add(self.key, 1, timeout=self.duration) else self.cache.incr(self.key)
            self._taken = True
            return int(count) <= self.num_requests

        return self.outage.call(take, fallback=lambda: True)

    def give_back(self) -> None:
        """The attempt did not fail (a good token): it takes no slot."""
        if not self._taken:
            return

        def give_back() -> None:
            with contextlib.suppress(ValueError):  # the window is over and its count gone
                self.cache.decr(self.key)

        # Not counted as degraded again: allow_request counted this request if Redis was down.
        self.outage.call(give_back, fallback=lambda: None, counted=False)

    def wait(self) -> float:
        """Until the current window ends."""
        return self.duration - (self.now % self.duration)
