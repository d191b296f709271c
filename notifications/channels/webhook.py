"""The webhook channel: a signed JSON POST to the client's URL, refusing internal targets.

Receivers verify ``X-Signature: sha256=<hex>`` by recomputing HMAC-SHA256 with their webhook
secret over ``"{X-Timestamp}.{raw body}"``, and drop repeats by ``Idempotency-Key`` (the
notification id, the same on every retry).
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import json
import socket
import time
from dataclasses import dataclass
from urllib.parse import urlsplit

import certifi
import urllib3
from urllib3.exceptions import HTTPError, NewConnectionError, SSLError
from urllib3.exceptions import TimeoutError as Urllib3TimeoutError

from ..conf import get_config
from .base import OutgoingMessage, PermanentChannelError, SendResult, TransientChannelError
from .deadline import Deadline, DeadlineHTTPConnectionPool, DeadlineHTTPSConnectionPool, http_deadline
from .http import raise_for_status

PROVIDER = "the webhook endpoint"
USER_AGENT = "notifications-webhook/1"
# Enough of the receiver's answer to say what it meant; the rest is not read.
RESPONSE_READ_LIMIT = 64 * 1024


def webhook_signature(secret: str, timestamp: str, body: str) -> str:
    digest = hmac.new(secret.encode(), f"{timestamp}.{body}".encode(), hashlib.sha256).hexdigest()
    return f"sha256={digest}"


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


def webhook_target(url: str, *, allow_hosts: tuple[str, ...]) -> WebhookTarget:
    """Resolve ``url``'s host once and vet every address it has (SSRF guard).

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
    try:
        infos = socket.getaddrinfo(hostname, port, type=socket.SOCK_STREAM)
    except (socket.gaierror, UnicodeError) as exc:
        raise TransientChannelError(f"could not resolve webhook host {hostname!r}: {exc}", code="dns_error") from exc
    addresses = list(dict.fromkeys(str(info[4][0]) for info in infos))
    if not addresses:
        raise TransientChannelError(f"webhook host {hostname!r} has no addresses", code="dns_error")
    if not allowed:
        for address in addresses:
            if _is_internal(address):
                raise PermanentChannelError(
                    f"refusing to send a webhook to {hostname!r}: it resolves to {address}, a private, loopback, "
                    "link-local, multicast or reserved address, or an IPv6 address carrying such an IPv4 address "
                    "(list the host or host:port in WEBHOOK_ALLOW_HOSTS to allow it)",
                    code="forbidden_target",
                    extra={"address": address},
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
    user_agent: str = USER_AGENT,
    provider: str = PROVIDER,
) -> tuple[int, urllib3.HTTPHeaderDict]:
    """POST ``body`` (JSON) to ``url``, vetted by the SSRF guard, signed with ``secret`` over
    ``timestamp`` (X-Timestamp, X-Signature) and carrying ``Idempotency-Key``; the answer's status
    and headers on 2xx, else the channel error it means (``provider`` names the receiver in it).
    The webhook channel and the status webhooks (services/status_events.py) both post this way.

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
            "X-Timestamp": timestamp,
            "X-Signature": webhook_signature(secret, timestamp, body),
            "Idempotency-Key": idempotency_key,
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
