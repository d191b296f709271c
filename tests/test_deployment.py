"""Production deployment: `check --deploy` on the documented production settings and on the
deploy manifests, the security settings from the environment, the Content-Security-Policy header,
admin login throttling (django-axes), and `runplatform` serving through gunicorn as deployed."""

from __future__ import annotations

import os
import re
import secrets
import signal
import socket
import subprocess
import sys
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import requests
import yaml
from axes.models import AccessAttempt
from django.conf import settings
from django.contrib.auth import get_user_model
from django.test import Client

from .helpers import ROOT, PlatformProcess, platform_env, wait_until

PRODUCTION_EXAMPLE = ROOT / "deploy" / "production.env.example"
SECURITY_WARNINGS = {"security.W004", "security.W008", "security.W012", "security.W016"}


def env_file_values(text: str) -> dict[str, str]:
    """The NAME=value lines of an env file, as compose and django-environ read them."""
    return dict(re.findall(r"^([A-Z][A-Z0-9_]*)=(.*)$", text, re.M))


def production_variables() -> dict[str, str]:
    variables = env_file_values(PRODUCTION_EXAMPLE.read_text())
    # The example leaves the secret for the operator to generate; so does this test.
    assert variables["SECRET_KEY"] == ""
    return {**variables, "SECRET_KEY": secrets.token_urlsafe(50)}


def compose_web_variables() -> dict[str, str]:
    compose = yaml.safe_load((ROOT / "deploy" / "compose.yaml").read_text())
    return {name: str(value) for name, value in compose["services"]["web"]["environment"].items()}


def k8s_config_variables() -> dict[str, str]:
    documents = list(yaml.safe_load_all((ROOT / "deploy" / "k8s" / "platform.yaml").read_text()))
    (config,) = [doc for doc in documents if doc["kind"] == "ConfigMap" and doc["metadata"]["name"] == "notifications-config"]
    web = next(doc for doc in documents if doc["kind"] == "Deployment" and doc["metadata"]["name"] == "notifications-web")
    sources = web["spec"]["template"]["spec"]["containers"][0]["envFrom"]
    # The ConfigMap comes after the Secret, so the Secret cannot override the security settings.
    assert sources[-1] == {"configMapRef": {"name": "notifications-config"}}
    return {name: str(value) for name, value in config["data"].items()}


def run_manage(variables: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    """``manage.py`` with exactly ``variables`` in its environment (plus PATH), nothing of the suite's."""
    environment = {"PATH": "/usr/bin:/bin", **variables}
    return subprocess.run(
        [sys.executable, str(ROOT / "manage.py"), *args],
        cwd=ROOT,
        env=environment,
        capture_output=True,
        text=True,
        timeout=120,
    )


# --- check --deploy ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "source",
    ["deploy/production.env.example", "deploy/compose.yaml web environment", "deploy/k8s ConfigMap notifications-config"],
)
def test_check_deploy_is_clean_with_the_documented_production_settings(source: str) -> None:
    if source.startswith("deploy/production"):
        variables = production_variables()
    else:
        # Only what the operator must give (the Secret / .env) beside the manifest's own settings.
        manifest = compose_web_variables() if "compose" in source else k8s_config_variables()
        variables = {"SECRET_KEY": secrets.token_urlsafe(50), "ALLOWED_HOSTS": "notifications.example.com", **manifest}
    result = run_manage(variables, "check", "--deploy", "--fail-level", "WARNING")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "System check identified no issues" in result.stdout


def test_every_deployment_reads_the_client_address_behind_the_one_proxy_it_puts_in_front() -> None:
    # Left at 0 behind a proxy, every client would have the proxy's address (its failed token
    # authentications, its admin lockouts); the proxy's port alone is reachable from outside.
    compose = yaml.safe_load((ROOT / "deploy" / "compose.yaml").read_text())
    assert compose["services"]["web"]["ports"] == ["127.0.0.1:8000:8000"]
    for variables in (env_file_values(PRODUCTION_EXAMPLE.read_text()), compose_web_variables(), k8s_config_variables()):
        assert variables["API_NUM_PROXIES"] == "1"


def test_check_deploy_names_each_security_setting_left_off() -> None:
    variables = {
        **production_variables(),
        "SECURE_SSL_REDIRECT": "false",
        "SECURE_HSTS_SECONDS": "0",
        "SESSION_COOKIE_SECURE": "false",
        "CSRF_COOKIE_SECURE": "false",
    }
    result = run_manage(variables, "check", "--deploy", "--fail-level", "WARNING")
    assert result.returncode != 0
    assert set(re.findall(r"\((security\.W\d+)\)", result.stderr)) == SECURITY_WARNINGS


# --- Settings from the environment ------------------------------------------------------------

PRINT_SETTINGS = (
    "import django, json; django.setup(); from django.conf import settings as s; print(json.dumps(["
    "s.SECURE_PROXY_SSL_HEADER, s.SECURE_SSL_REDIRECT, s.SECURE_HSTS_SECONDS, s.SECURE_HSTS_INCLUDE_SUBDOMAINS, "
    "s.SECURE_HSTS_PRELOAD, s.SESSION_COOKIE_SECURE, s.CSRF_COOKIE_SECURE, s.AXES_FAILURE_LIMIT, "
    "s.AXES_COOLOFF_TIME.total_seconds()]))"
)


def print_settings(**variables: str) -> subprocess.CompletedProcess[str]:
    environment = {"PATH": "/usr/bin:/bin", "DJANGO_SETTINGS_MODULE": "platform.settings", **variables}
    return subprocess.run(
        [sys.executable, "-c", PRINT_SETTINGS], cwd=ROOT, env=environment, capture_output=True, text=True, timeout=60
    )


def test_the_security_settings_are_read_from_the_environment_and_are_off_by_default() -> None:
    default = print_settings()
    assert default.returncode == 0, default.stderr
    assert default.stdout.strip().splitlines()[-1] == "[null, false, 0, false, false, false, false, 5, 900.0]"

    production = print_settings(
        SECURE_PROXY_SSL_HEADER="HTTP_X_FORWARDED_PROTO,https",
        SECURE_SSL_REDIRECT="true",
        SECURE_HSTS_SECONDS="600",
        SECURE_HSTS_INCLUDE_SUBDOMAINS="true",
        SECURE_HSTS_PRELOAD="true",
        SESSION_COOKIE_SECURE="true",
        CSRF_COOKIE_SECURE="true",
        AXES_FAILURE_LIMIT="3",
        AXES_COOLOFF_SECONDS="60",
    )
    assert production.returncode == 0, production.stderr
    assert (
        production.stdout.strip().splitlines()[-1]
        == '[["HTTP_X_FORWARDED_PROTO", "https"], true, 600, true, true, true, true, 3, 60.0]'
    )


def test_an_unreadable_proxy_ssl_header_stops_start_up_naming_the_variable() -> None:
    result = print_settings(SECURE_PROXY_SSL_HEADER="X-Forwarded-Proto")
    assert result.returncode != 0
    assert "SECURE_PROXY_SSL_HEADER='X-Forwarded-Proto' is not understood" in result.stderr


# --- Content-Security-Policy ------------------------------------------------------------------


def test_every_page_has_a_content_security_policy_without_unsafe_inline(admin_client: Client) -> None:
    for path in ("/admin/", "/admin/notifications/notification/", "/api/docs/", "/healthz"):
        policy = admin_client.get(path)["Content-Security-Policy"]
        assert "default-src 'self'" in policy and "object-src 'none'" in policy and "frame-ancestors 'none'" in policy
        assert "unsafe-inline" not in policy and "unsafe-eval" not in policy


def test_the_api_docs_inline_script_and_style_carry_the_responses_nonce(client: Client) -> None:
    first, second = client.get("/api/docs/"), client.get("/api/docs/")
    nonce = re.search(r"script-src 'self' 'nonce-([^']+)'", first["Content-Security-Policy"])
    assert nonce, first["Content-Security-Policy"]
    assert f"style-src 'self' 'nonce-{nonce[1]}'" in first["Content-Security-Policy"]
    html = first.content.decode()
    assert f'<script nonce="{nonce[1]}">' in html and f'<style nonce="{nonce[1]}">' in html
    # Every inline script and style has it, and a nonce is never reused.
    assert html.count("<script>") == 0 and html.count("<style>") == 0
    assert nonce[1] not in second["Content-Security-Policy"]


# --- Admin login throttling (django-axes) -----------------------------------------------------


def admin_login(password: str, *, address: str = "203.0.113.7") -> Any:
    return Client(REMOTE_ADDR=address).post(
        "/admin/login/?next=/admin/", {"username": "ops", "password": password, "next": "/admin/"}
    )


@pytest.fixture
def ops_user(db: None) -> Any:
    return get_user_model().objects.create_user("ops", password="right-pass-1", is_staff=True, is_superuser=True)


def test_a_good_admin_login_before_the_limit_works_and_resets_the_count(ops_user: Any) -> None:
    assert settings.AXES_ENABLED and settings.AXES_FAILURE_LIMIT >= 2
    for _ in range(settings.AXES_FAILURE_LIMIT - 1):
        refused = admin_login("wrong")
        assert refused.status_code == 200 and b"Please enter the correct username and password" in refused.content

    good = admin_login("right-pass-1")
    assert good.status_code == 302 and good["Location"] == "/admin/"
    assert AccessAttempt.objects.count() == 0  # a success starts the count again

    assert admin_login("wrong").status_code == 200


def test_the_login_after_the_limit_is_refused_even_with_the_right_password_until_the_cool_off(ops_user: Any) -> None:
    for _ in range(settings.AXES_FAILURE_LIMIT - 1):
        assert admin_login("wrong").status_code == 200
    assert admin_login("wrong").status_code == 429  # the Nth failure locks the pair out

    locked = admin_login("right-pass-1")
    assert locked.status_code == 429 and b"too many login attempts" in locked.content
    assert "_auth_user_id" not in locked.client.session

    # The lock is per username and address: the same user from elsewhere still gets in.
    assert admin_login("right-pass-1", address="198.51.100.9").status_code == 302

    # Once the cool-off has passed, the right password works again.
    AccessAttempt.objects.update(
        attempt_time=AccessAttempt.objects.get().attempt_time - settings.AXES_COOLOFF_TIME - timedelta(seconds=1)
    )
    assert admin_login("right-pass-1").status_code == 302


# --- runplatform on the real services: gunicorn ------------------------------------------------


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def start_platform(**overrides: str) -> tuple[PlatformProcess, str, requests.Response]:
    """``manage.py runplatform`` on this run's database, vhost and key prefix, once /healthz answers."""
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    platform = PlatformProcess("runplatform", "--addrport", f"127.0.0.1:{port}", env=platform_env(**overrides))

    def healthz() -> requests.Response | None:
        try:
            return requests.get(f"{base}/healthz", timeout=10, allow_redirects=False)
        except (requests.ConnectionError, requests.Timeout):  # not listening yet, or still loading the app
            return None

    try:
        return platform, base, wait_until(healthz, timeout=60, message=f"/healthz answers on {base}")
    except BaseException:
        platform.stop()
        raise


def child_pids(platform: PlatformProcess) -> dict[str, int]:
    return {name: int(pid) for name, pid in re.findall(r"\b(web|worker|sweeper|consumer) pid (\d+)", platform.output())}


def process_exists(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(") ", 1)[1][:1]
    except FileNotFoundError:
        return False
    return state != "Z"


@pytest.mark.django_db(transaction=True)
def test_runplatform_on_the_services_serves_through_gunicorn_and_uvicorn_with_the_production_security_settings() -> None:
    platform, base, health = start_platform(
        SECURE_PROXY_SSL_HEADER="HTTP_X_FORWARDED_PROTO,https",
        SECURE_SSL_REDIRECT="true",
        SECURE_HSTS_SECONDS="3600",
        SESSION_COOKIE_SECURE="true",
        CSRF_COOKIE_SECURE="true",
    )
    try:
        # Probes come over plain HTTP and are not redirected; the server is gunicorn's uvicorn worker
        # (platform/asgi.py), which serves the inbox's live stream at the same address.
        assert health.status_code == 200 and health.headers["Server"] == "uvicorn"
        output = platform.output()
        assert f"Listening at: {base}" in output and "uvicorn_worker.UvicornWorker" in output
        stream = requests.get(f"{base}/api/v1/inbox/stream", headers={"X-Forwarded-Proto": "https"}, timeout=5)
        assert stream.status_code == 401 and stream.json()["error"]["code"] == "not_authenticated"
        assert set(child_pids(platform)) == {"web", "worker", "sweeper", "consumer"}

        plain = requests.get(f"{base}/admin/login/", timeout=5, allow_redirects=False)
        assert plain.status_code == 301 and plain.headers["Location"] == f"https://{base.removeprefix('http://')}/admin/login/"

        secure = requests.get(f"{base}/admin/login/", headers={"X-Forwarded-Proto": "https"}, timeout=5, allow_redirects=False)
        assert secure.status_code == 200
        assert secure.headers["Strict-Transport-Security"] == "max-age=3600"
        assert "script-src 'self'" in secure.headers["Content-Security-Policy"]
        csrf_cookie = next(cookie for cookie in secure.cookies if cookie.name == "csrftoken")
        assert csrf_cookie.secure
    finally:
        # SIGTERM to runplatform alone, as a supervisor would: it stops its children itself.
        if platform.process.poll() is None:
            platform.process.terminate()
        returncode = platform.process.wait(timeout=60)
        platform.stop()
    assert returncode == 0, platform.output()[-3000:]
    for name, pid in child_pids(platform).items():
        assert not process_exists(pid), f"{name} (pid {pid}) outlived runplatform"


@pytest.mark.django_db(transaction=True)
def test_runplatform_stops_everything_when_one_of_its_processes_dies() -> None:
    platform, _, _ = start_platform()
    try:
        children = child_pids(platform)
        os.kill(children["sweeper"], signal.SIGKILL)
        returncode = platform.process.wait(timeout=60)
    finally:
        platform.stop()
    assert returncode != 0
    assert "stopping the platform: sweeper (exit -9) exited" in platform.output()
    for name, pid in children.items():
        assert not process_exists(pid), f"{name} (pid {pid}) outlived runplatform"
