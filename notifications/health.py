"""Readiness checks: can this process reach the database, the broker and Redis right now?"""

from __future__ import annotations

from dataclasses import dataclass

import pika
from django.db import connection

from .conf import broker_connection_parameters, broker_is_embedded, redis_client

PROBE_TIMEOUT_SECONDS = 2.0


@dataclass(frozen=True)
class DependencyCheck:
    name: str
    ok: bool
    detail: str = ""


def _check_database() -> DependencyCheck:
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
        return DependencyCheck("database", True)
    except Exception as exc:
        return DependencyCheck("database", False, f"{type(exc).__name__}: {exc}")


def _check_broker() -> DependencyCheck:
    if broker_is_embedded():
        return DependencyCheck("broker", True, "embedded")
    try:
        pika.BlockingConnection(broker_connection_parameters(timeout=PROBE_TIMEOUT_SECONDS)).close()
        return DependencyCheck("broker", True)
    except Exception as exc:
        return DependencyCheck("broker", False, f"{type(exc).__name__}: {exc}")


def _check_cache() -> DependencyCheck:
    try:
        client = redis_client()
        if client is None:
            return DependencyCheck("redis", True, "local memory")
        client.ping()
        return DependencyCheck("redis", True)
    except Exception as exc:
        return DependencyCheck("redis", False, f"{type(exc).__name__}: {exc}")


def readiness_checks() -> list[DependencyCheck]:
    return [_check_database(), _check_broker(), _check_cache()]
