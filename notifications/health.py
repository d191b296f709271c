"""Readiness checks: can this process reach the database, the broker and Redis right now?"""

from __future__ import annotations

import copy
from dataclasses import dataclass

import dramatiq
from django.core.cache import cache
from django.db import connection


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
    broker = dramatiq.get_broker()
    parameters = getattr(broker, "parameters", None)
    if parameters is None:
        return DependencyCheck("broker", True, "embedded")
    import pika

    probe = [copy.copy(p) for p in (parameters if isinstance(parameters, list) else [parameters])]
    for p in probe:
        p.connection_attempts = 1
        p.socket_timeout = 2
        p.blocked_connection_timeout = 2
    try:
        pika.BlockingConnection(probe).close()
        return DependencyCheck("broker", True)
    except Exception as exc:
        return DependencyCheck("broker", False, f"{type(exc).__name__}: {exc}")


def _check_cache() -> DependencyCheck:
    client = getattr(cache, "client", None)
    if client is None or not hasattr(client, "get_client"):
        return DependencyCheck("redis", True, "local memory")
    try:
        client.get_client(write=True).ping()
        return DependencyCheck("redis", True)
    except Exception as exc:
        return DependencyCheck("redis", False, f"{type(exc).__name__}: {exc}")


def readiness_checks() -> list[DependencyCheck]:
    return [_check_database(), _check_broker(), _check_cache()]
