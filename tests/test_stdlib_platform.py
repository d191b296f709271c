"""The project package `platform` must not break the standard library's `platform` module."""

from __future__ import annotations

import subprocess
import sys
import uuid

import pika
import pytest
from django.conf import settings

from .helpers import ROOT, platform_env

STDLIB_CHECK = """
import platform, uuid, sys, pika
import platform.settings
assert platform.__file__.endswith('platform/__init__.py'), platform.__file__
print(platform.system(), platform.machine(), platform.python_version(), uuid.uuid4().version)
params = pika.URLParameters(sys.argv[1])
connection = pika.BlockingConnection(params)
print('pika-open', connection.is_open)
connection.close()
"""


def test_platform_package_is_ours_and_keeps_the_stdlib_api() -> None:
    import platform

    assert platform.__file__.startswith(str(ROOT / "platform"))
    assert hasattr(platform, "__path__")  # a package, so platform.settings imports
    assert platform.system() in {"Linux", "Darwin", "Windows"}
    assert platform.python_version() == ".".join(map(str, sys.version_info[:3]))
    assert platform.uname().system == platform.system()


def test_uuid_works_with_the_project_platform_package() -> None:
    first, second = uuid.uuid4(), uuid.uuid4()
    assert first != second and first.version == 4
    assert uuid.uuid1().version == 1  # uuid1 is the one that consults platform at import time


@pytest.mark.services
def test_pika_connects_under_pytest() -> None:
    connection = pika.BlockingConnection(pika.URLParameters(settings.BROKER_URL))
    try:
        assert connection.is_open
        channel = connection.channel()
        result = channel.queue_declare(queue="", exclusive=True)
        assert result.method.queue.startswith("amq.gen-")
    finally:
        connection.close()


@pytest.mark.services
def test_python_c_from_the_repo_root_gets_both_apis() -> None:
    completed = subprocess.run(
        [sys.executable, "-c", STDLIB_CHECK, settings.BROKER_URL],
        cwd=ROOT,
        env=platform_env(),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert completed.returncode == 0, completed.stderr
    system, _machine, version, uuid_version, *_ = completed.stdout.split()
    assert system == "Linux" and version.count(".") == 2 and uuid_version == "4"
    assert "pika-open True" in completed.stdout


@pytest.mark.services
def test_manage_py_shell_gets_the_stdlib_api() -> None:
    code = (
        "import platform, uuid, pika; from django.conf import settings; "
        "connection = pika.BlockingConnection(pika.URLParameters(settings.BROKER_URL)); "
        "print(platform.system(), uuid.uuid4().version, platform.__name__, connection.is_open); connection.close()"
    )
    completed = subprocess.run(
        [sys.executable, "manage.py", "shell", "--no-imports", "-c", code],
        cwd=ROOT,
        env=platform_env(),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert completed.returncode == 0, completed.stderr
    assert completed.stdout.split() == ["Linux", "4", "platform", "True"]
