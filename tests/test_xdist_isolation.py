"""scripts/test.sh runs the suite on pytest-xdist workers: each must have a database, RabbitMQ vhost
and Redis key prefix of its own, in its own process and in every process a test starts."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from urllib.parse import unquote, urlsplit

import pika
import pytest
from django.conf import settings
from django.core.cache import cache
from django.db import connection

from notifications.conf import redis_client

from .helpers import ROOT, platform_env
from .xdist_isolation import worker_vhost_url

CHILD_NAMES = """
import json, django
django.setup()
from django.conf import settings
print(json.dumps([settings.BROKER_URL, settings.CACHE_KEY_PREFIX]))
"""


def test_a_workers_vhost_is_the_runs_with_the_worker_id_added_and_the_rest_of_the_url_kept() -> None:
    assert worker_vhost_url("amqp://guest:guest@127.0.0.1:5672/notifications-test-1", "gw1") == (
        "amqp://guest:guest@127.0.0.1:5672/notifications-test-1-gw1"
    )
    assert worker_vhost_url("amqp://u:p@mq:5672/a%2Fb?heartbeat=2", "gw0") == "amqp://u:p@mq:5672/a%2Fb-gw0?heartbeat=2"


@pytest.mark.services
@pytest.mark.django_db
def test_this_worker_and_the_processes_it_starts_use_the_workers_own_database_vhost_and_key_prefix(worker_id: str) -> None:
    vhost = unquote(urlsplit(settings.BROKER_URL).path[1:])
    names = [connection.settings_dict["NAME"], vhost, settings.CACHE_KEY_PREFIX]
    if worker_id == "master":  # one process (the exclusive phase, TEST_WORKERS=0): the run's own names
        assert not [name for name in names if re.search(r"[-_]gw[0-9]+$", name)], names
    else:
        assert [name[-len(worker_id) - 1 :] for name in names] == [f"_{worker_id}", f"-{worker_id}", f"-{worker_id}"], names

    # The vhost exists and takes this worker's connection; a cached key carries this worker's prefix.
    pika.BlockingConnection(pika.URLParameters(settings.BROKER_URL)).close()
    cache.set("xdist-isolation", 1)
    assert redis_client().exists(f"{settings.CACHE_KEY_PREFIX}:1:xdist-isolation") == 1

    child = subprocess.run(
        [sys.executable, "-c", CHILD_NAMES], cwd=ROOT, env=platform_env(), capture_output=True, text=True, timeout=60
    )
    assert child.returncode == 0, child.stderr
    assert json.loads(child.stdout.splitlines()[-1]) == [settings.BROKER_URL, settings.CACHE_KEY_PREFIX]
