"""The webhook channel: a signed JSON POST to the client's URL, refusing internal targets.

Posts are signed as Standard Webhooks (https://www.standardwebhooks.com) sign them, so any of its
verifiers accepts them: ``webhook-id`` (the notification or event id, the same on every retry, also
sent as ``Idempotency-Key``), ``webhook-timestamp`` (Unix seconds) and ``webhook-signature``
(``v1,<base64 HMAC-SHA256 of "{id}.{timestamp}.{raw body}">``, one per secret in force, space
separated). The older ``X-Timestamp``/``X-Signature`` pair (hex HMAC over "{timestamp}.{body}") is
deprecated and sent while WEBHOOK_LEGACY_SIGNATURE_HEADERS is on.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import ipaddress
import json
import logging
import os
import socket
import threading
import time
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeoutError
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import certifi
import urllib3
from urllib3.exceptions import HTTPError, NewConnectionError, SSLError
from urllib3.exceptions import TimeoutError as Urllib3TimeoutError

from ...conf import get_config
from ..base import OutgoingMessage, PermanentChannelError, SendResult, TransientChannelError
from ..deadline import Deadline, DeadlineHTTPConnectionPool, DeadlineHTTPSConnectionPool, http_deadline
from ..http import raise_for_status

logger = logging.getLogger("notifications.channels")

PROVIDER = "the webhook endpoint"
USER_AGENT = "notifications-webhook/1"
# Enough of the receiver's answer to say what it meant; the rest is not read.
RESPONSE_READ_LIMIT = 64 * 1024
# What a refusal says, and all it says: neither the address a name resolved to nor the resolver's
# words, which would map the internal network for whoever submits URLs (a client, an admin form).
NOT_PUBLIC = "not a public address"
NOT_RESOLVED = "could not be resolved"
# getaddrinfo has no timeout of its own (the system resolver's can be tens of seconds), so it runs
# in a thread its caller waits for at most ADDRESS_LOOKUP_TIMEOUT_SECONDS. Lookups cut off still run
# until the resolver gives up; past this many at once in a process, a lookup is not started.
MAX_LOOKUPS_IN_FLIGHT = 256


WEBHOOK_SECRET_PREFIX = "whsec_"


def webhook_signature(secret: str, timestamp: str, body: str) -> str:
    """The deprecated ``X-Signature``: hex HMAC-SHA256 keyed with the secret as the client holds it."""
    digest = hmac.new(secret.encode(), f"{timestamp}.{body}".encode(), hashlib.sha256).hexdigest()
    return f"sha256={digest}"


def standard_webhook_key(secret: str) -> bytes:
    """The HMAC key of a secret: the bytes a ``whsec_`` secret's base64 encodes. A secret made
    before secrets had that form is its own bytes (its ``whsec_`` form is ``whsec_`` + base64 of it)."""
    if secret.startswith(WEBHOOK_SECRET_PREFIX):
        return base64.b64decode(secret[len(WEBHOOK_SECRET_PREFIX) :] + "==")
    return secret.encode()


def standard_webhook_signature(secret: str, webhook_id: str, timestamp: str, body: str) -> str:
    digest = hmac.new(standard_webhook_key(secret), f"{webhook_id}.{timestamp}.{body}".encode(), hashlib.sha256).digest()
    return "v1," + base64.b64encode(digest).decode()


def webhook_signature_headers(*, secrets: tuple[str, ...], webhook_id: str, timestamp: str, body: str) -> dict[str, str]:
    """The signature headers of one post; the first secret is the current one."""
    headers = {
        "webhook-id": webhook_id,
        "webhook-timestamp": timestamp,
        "webhook-signature": " ".join(standard_webhook_signature(secret, webhook_id, timestamp, body) for secret in secrets),
    }
    if get_config().webhook_legacy_signature_headers:
        headers["X-Timestamp"] = timestamp
        headers["X-Signature"] = webhook_signature(secrets[0], timestamp, body)
    return headers


@dataclass(frozen=True)
class WebhookTarget:
    """A webhook URL with the one address it was vetted at, so the connection goes there."""

    scheme: str
    hostname: str
    port: int
    host_header: str
    path: str
    address: str


# IPv6 prefixes that only translate to an IPv4 address carried inside them: a connection to one
# reaches that IPv4 address, so the embedded address alone decides (RFC 4291 mapped, RFC 6052 NAT64).
_IPV4_MAPPED = ipaddress.IPv6Network("::ffff:0:0/96")
_NAT64_WELL_KNOWN = ipaddress.IPv6Network("64:ff9b::/96")
# RFC 8215 local-use NAT64: where the IPv4 address sits depends on the prefix length each network
# chose, so it cannot be decoded; it is a local translator by definition, so it is refused whole.
_NAT64_LOCAL_USE = ipaddress.IPv6Network("64:ff9b:1::/48")
# Deprecated IPv4-compatible (RFC 4291) and IPv4-translated (RFC 2765) forms.
_IPV4_COMPATIBLE = ipaddress.IPv6Network("::/96")
_IPV4_TRANSLATED = ipaddress.IPv6Network("::ffff:0:0:0/96")


def _is_internal_ip(ip: ipaddress.IPv4Address | ipaddress.IPv6Address) -> bool:
    return (
        ip.is_private
        or ip.is_loopback
        or ip.is_link_local
        or ip.is_multicast
        or ip.is_reserved
        or ip.is_unspecified
        or not ip.is_global
    )


def embedded_ipv4(ip: ipaddress.IPv6Address) -> list[ipaddress.IPv4Address]:
    """The IPv4 addresses an IPv6 address carries: mapped, compatible, translated, NAT64, 6to4 and
    Teredo (its server and its de-obfuscated client)."""
    if ip in _IPV4_MAPPED or ip in _NAT64_WELL_KNOWN or ip in _IPV4_COMPATIBLE or ip in _IPV4_TRANSLATED:
        return [ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF)]
    if ip.sixtofour is not None:
        return [ip.sixtofour]
    if ip.teredo is not None:
        return list(ip.teredo)
    return []


def _is_internal(address: str) -> bool:
    ip = ipaddress.ip_address(address.split("%", 1)[0])
    if isinstance(ip, ipaddress.IPv4Address):
        return _is_internal_ip(ip)
    if ip in _NAT64_LOCAL_USE:
        return True
    embedded = embedded_ipv4(ip)
    if any(_is_internal_ip(ipv4) for ipv4 in embedded):
        return True
    if embedded and (ip in _IPV4_MAPPED or ip in _NAT64_WELL_KNOWN):
        return False
    # 6to4, Teredo and the rest are judged as IPv6 addresses too: a relay or a local tunnel may
    # answer for them whatever they embed.
    return _is_internal_ip(ip)


_in_flight_lock = threading.Lock()
_in_flight = 0


def _forget_lookups() -> None:
    # A forked child (gunicorn, the Dramatiq worker processes) has none of its parent's threads.
    global _in_flight, _in_flight_lock
    _in_flight, _in_flight_lock = 0, threading.Lock()


os.register_at_fork(after_in_child=_forget_lookups)


def _lookup_slot_take() -> bool:
    global _in_flight
    with _in_flight_lock:
        if _in_flight >= MAX_LOOKUPS_IN_FLIGHT:
            return False
        _in_flight += 1
        return True


def _lookup_slot_give() -> None:
    global _in_flight
    with _in_flight_lock:
        _in_flight = max(0, _in_flight - 1)


def host_addresses(hostname: str, port: int, *, timeout: float) -> list[str]:
    """The addresses ``hostname`` resolves to, within ``timeout`` seconds; TransientChannelError
    (code ``dns_error``) if it does not resolve in time, saying nothing of the resolver's answer.

    Each lookup runs in a daemon thread of its own, not a shared pool: a lookup cut off goes on
    until the resolver gives up, and one client's hanging names must not hold the lookups of others."""
    if not _lookup_slot_take():
        logger.warning("%d name lookups already in flight; %r not looked up", MAX_LOOKUPS_IN_FLIGHT, hostname)
        raise TransientChannelError(f"the webhook host {NOT_RESOLVED}", code="dns_error")
    answer: Future[Any] = Future()

    def look_up() -> None:
        try:
            answer.set_result(socket.getaddrinfo(hostname, port, type=socket.SOCK_STREAM))
        except BaseException as exc:  # handed to the caller, if it still waits
            answer.set_exception(exc)
        finally:
            _lookup_slot_give()

    threading.Thread(target=look_up, name="address-lookup", daemon=True).start()
    try:
        infos = answer.result(timeout=timeout)
    except FutureTimeoutError:
        logger.info("lookup of webhook host %r cut off after %g s", hostname, timeout)
        raise TransientChannelError(f"the webhook host {NOT_RESOLVED} within {timeout:g} s", code="dns_error") from None
    except (OSError, UnicodeError) as exc:  # socket.gaierror is an OSError
        logger.info("lookup of webhook host %r failed: %s", hostname, exc)
        raise TransientChannelError(f"the webhook host {NOT_RESOLVED}", code="dns_error") from None
    addresses = list(dict.fromkeys(str(info[4][0]) for info in infos))
    if not addresses:
        raise TransientChannelError(f"the webhook host {NOT_RESOLVED}", code="dns_error")
    return addresses


def webhook_target(url: str, *, allow_hosts: tuple[str, ...]) -> WebhookTarget:
    """Resolve ``url``'s host once, within ADDRESS_LOOKUP_TIMEOUT_SECONDS, and vet every address
    it has (SSRF guard).

    All addresses are checked, not just the first, and the connection is then made to a vetted
    one: resolving again at connect time would let a DNS answer change in between (rebinding).
    """
    parts = urlsplit(url)
    hostname = parts.hostname or ""
    if parts.scheme not in ("http", "https") or not hostname:
        raise PermanentChannelError(f"{url!r} is not an http(s) URL", code="invalid_address")
    try:
        port = parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError:
        raise PermanentChannelError(f"{url!r} has an invalid port", code="invalid_address") from None
    bracketed = f"[{hostname}]" if ":" in hostname else hostname
    allowed = hostname in allow_hosts or bracketed in allow_hosts or f"{bracketed}:{port}" in allow_hosts
    addresses = host_addresses(hostname, port, timeout=get_config().address_lookup_timeout_seconds)
    if not allowed:
        for address in addresses:
            if _is_internal(address):
                # The operator's log names the address; the refusal, which a client sees, does not.
                logger.info("webhook host %r refused: it resolves to %s", hostname, address)
                raise PermanentChannelError(
                    f"refusing to send to the webhook host: it is {NOT_PUBLIC} (a private, loopback, link-local, "
                    "multicast or reserved one; an operator may list the host or host:port in WEBHOOK_ALLOW_HOSTS)",
                    code="forbidden_target",
                )
    default_port = port == (443 if parts.scheme == "https" else 80)
    return WebhookTarget(
        scheme=parts.scheme,
        hostname=hostname,
        port=port,
        host_header=bracketed if default_port else f"{bracketed}:{port}",
        path=(parts.path or "/") + (f"?{parts.query}" if parts.query else ""),
        address=addresses[0],
    )


def webhook_post_signed(
    *,
    url: str,
    secret: str,
    body: str,
    timestamp: str,
    idempotency_key: str,
    previous_secrets: tuple[str, ...] = (),
    user_agent: str = USER_AGENT,
    provider: str = PROVIDER,
) -> tuple[int, urllib3.HTTPHeaderDict]:
    """POST ``body`` (JSON) to ``url``, vetted by the SSRF guard, signed with ``secret`` (and
    ``previous_secrets``, those still in their grace period) as Standard Webhooks sign, with
    ``idempotency_key`` as the ``webhook-id`` and ``Idempotency-Key``; the answer's status and
    headers on 2xx, else the channel error it means (``provider`` names the receiver in it).
    The webhook channel and the status webhooks (services/records/status_events.py) both post this way.

    The lookup, connect, send and the whole answer share one deadline, WEBHOOK_TIMEOUT_SECONDS: a
    receiver that trickles its answer is cut there (a transient ``timeout``)."""
    if not secret:
        raise PermanentChannelError("the API client has no webhook secret to sign with", code="not_configured")
    config = get_config()
    with http_deadline(config.webhook_timeout_seconds) as deadline:
        target = webhook_target(url, allow_hosts=config.webhook_allow_hosts)
        headers = {
            "Host": target.host_header,
            "Content-Type": "application/json",
            "User-Agent": user_agent,
            "Idempotency-Key": idempotency_key,
            **webhook_signature_headers(
                secrets=(secret, *previous_secrets),
                webhook_id=idempotency_key,
                timestamp=timestamp,
                body=body,
            ),
        }
        status, response_headers, text = _post(target, body.encode(), headers, deadline=deadline)
    raise_for_status(status, response_headers, text, provider=provider)
    return status, response_headers


class WebhookProvider:
    def send(self, message: OutgoingMessage) -> SendResult:
        timestamp = str(int(time.time()))
        body = json.dumps(
            {
                "id": message.notification_id,
                "channel": message.channel,
                "subject": message.subject,
                "message": message.body,
                "metadata": message.metadata,
                "timestamp": int(timestamp),
            },
            separators=(",", ":"),
            default=str,
        )
        status, response_headers = webhook_post_signed(
            url=message.address,
            secret=message.webhook_secret,
            body=body,
            timestamp=timestamp,
            idempotency_key=message.idempotency_key or message.notification_id,
            previous_secrets=message.webhook_previous_secrets,
        )
        return SendResult(provider_message_id=response_headers.get("X-Request-Id", "")[:255], response_summary=f"HTTP {status}")


def _post(
    target: WebhookTarget, body: bytes, headers: dict[str, str], *, deadline: Deadline
) -> tuple[int, urllib3.HTTPHeaderDict, str]:
    pool: urllib3.HTTPConnectionPool
    if deadline.expired():  # the lookup took it all
        raise TransientChannelError(f"{target.host_header}: {deadline.exceeded()}", code="timeout")
    limits = deadline.timeout()
    if target.scheme == "https":
        # Connect to the vetted address but check the certificate (and send SNI) for the name.
        pool = DeadlineHTTPSConnectionPool(
            target.address,
            target.port,
            server_hostname=target.hostname,
            assert_hostname=target.hostname,
            cert_reqs="CERT_REQUIRED",
            ca_certs=certifi.where(),
            timeout=limits,
            retries=False,
            maxsize=1,
        )
    else:
        pool = DeadlineHTTPConnectionPool(target.address, target.port, timeout=limits, retries=False, maxsize=1)
    try:
        with pool:
            response = pool.urlopen(
                "POST", target.path, body=body, headers=headers, redirect=False, assert_same_host=False, preload_content=False
            )
            try:
                text = response.read(RESPONSE_READ_LIMIT).decode("utf-8", "replace")
            finally:
                response.release_conn()
    except (HTTPError, OSError) as exc:
        raise _channel_error(target, exc, deadline) from exc
    return response.status, response.headers, text


def _channel_error(target: WebhookTarget, exc: Exception, deadline: Deadline) -> TransientChannelError:
    # urllib3's NewConnectionError (refused, unreachable) is a subclass of its TimeoutError.
    if isinstance(exc, NewConnectionError) and not deadline.expired():
        return TransientChannelError(f"could not connect to {target.host_header}: {exc}", code="connection_error")
    if isinstance(exc, Urllib3TimeoutError | TimeoutError) or deadline.expired():
        # However the cut surfaced (a read timeout, a send aborted mid-way), it is the deadline's.
        return TransientChannelError(f"{target.host_header} did not answer in time: {deadline.exceeded()}", code="timeout")
    if isinstance(exc, SSLError):
        return TransientChannelError(f"TLS with {target.host_header} failed: {exc}", code="tls_error")
    return TransientChannelError(f"webhook request to {target.host_header} failed: {exc}", code="connection_error")
