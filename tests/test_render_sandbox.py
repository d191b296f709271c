"""The backstop that does not trust the budget (issue #36): stored templates render, and are checked
when stored, in a small pool of processes with OS limits (render_sandbox). A render that gets past
the cooperative budget is stopped by the kernel, its process killed and replaced, the render
failing as ``render_limit``, and the next render works.

The holes are simulated, and the simulation is an option, not a patch: MAX_MESSAGE_BYTES of 1 GB
lets the budget's byte counts (32 times it) never stop the issue's regroup memory bomb (250 MB),
and TEMPLATE_RENDER_SECONDS of 100 s leaves a loop of 9 million steps to the CPU limit alone. The
budget and the sandbox get the same values: only the sandbox's own limits stop these renders."""

from __future__ import annotations

import os
import threading
from typing import Any

import dramatiq
import pytest
from rest_framework.test import APIClient

from notifications import services
from notifications.models import Broadcast, Digest, Notification, Recipient, Status, TemplateVariant
from notifications.services.policy.render_sandbox import RenderSandbox, current_sandbox

from .factories import accept_notification, make_api_client, make_template
from .fakes import override_notifications
from .helpers import wait_until
from .test_template_bounds import SQUARE, preview, put_body
from .test_template_work_bounds import ATTACKS, CLOSE, DATA, OPEN, measured

MB = 1024 * 1024
BOMB = OPEN + ATTACKS["regroup-memory"] + CLOSE
# A byte budget too wide to stop the bomb: the hole the sandbox is there for.
HOLE = {"MAX_MESSAGE_BYTES": 1_000_000_000}
# One process, 64 MB past its start: a small pool for one test file, made once (the limits are its key).
SANDBOX = {"TEMPLATE_SANDBOX_PROCESSES": 1, "TEMPLATE_SANDBOX_MEMORY_BYTES": 64 * MB, "TEMPLATE_SANDBOX_CPU_SECONDS": 1}


def sandbox() -> RenderSandbox:
    pool = current_sandbox()
    assert pool is not None and pool.limits.processes == 1
    return pool


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def good_preview_works(api: APIClient) -> bool:
    assert put_body(api, "good", "Hello {{ name }}").status_code in (200, 201)
    response = preview(api, "good", {"name": "Ann"})
    return response.status_code == 200 and response.json()["body"] == "Hello Ann"


@override_notifications(TEMPLATE_SANDBOX_PROCESSES=0, **HOLE)
def test_with_the_hole_the_bomb_renders_in_process_so_only_the_sandbox_stops_it_below(api: APIClient) -> None:
    assert put_body(api, "bomb", BOMB).status_code == 201

    response, _, peak = measured(lambda: preview(api, "bomb", DATA))

    assert response.status_code == 200 and response.json()["body"] == "8000"
    assert peak > 150 * MB, peak


@override_notifications(**SANDBOX, **HOLE)
def test_a_render_past_the_memory_limit_kills_its_process_which_is_replaced_and_fails_as_render_limit(api: APIClient) -> None:
    assert good_preview_works(api)  # the pool's one process, started
    [before] = sandbox().idle_pids()
    started = sandbox().started
    assert put_body(api, "bomb", BOMB).status_code == 201

    response, seconds, peak = measured(lambda: preview(api, "bomb", DATA))

    assert response.status_code == 400, response.content[:300]
    error = response.json()["error"]
    assert (error["code"], error["field"]) == ("render_limit", "template")
    assert "TEMPLATE_SANDBOX_MEMORY_BYTES" in error["message"], error
    assert not alive(before)
    assert seconds < 2 and peak < 64 * MB, (seconds, peak)
    assert good_preview_works(api)
    [after] = sandbox().idle_pids()
    assert after != before and sandbox().started == started + 1


@override_notifications(**SANDBOX, TEMPLATE_RENDER_SECONDS=100)
def test_a_render_past_the_cpu_limit_is_killed_by_the_kernel_and_fails_as_render_limit(api: APIClient) -> None:
    assert good_preview_works(api)
    [before] = sandbox().idle_pids()
    assert put_body(api, "square", SQUARE).status_code == 201

    response, seconds, _ = measured(lambda: preview(api, "square", {"items": list(range(3000))}))

    assert response.status_code == 400, response.content[:300]
    assert response.json()["error"]["code"] == "render_limit"
    # The kernel's SIGXCPU; or, on a machine too busy to give the process its second of CPU within
    # the wall timeout (2 x 1 s + 1 s), the parent's kill at that timeout.
    message = response.json()["error"]["message"]
    assert "TEMPLATE_SANDBOX_CPU_SECONDS (1 s of CPU)" in message or "took longer than 3 s" in message, message
    assert seconds < 4, seconds  # 1 to 2 s of CPU (the kernel counts whole seconds), on a shared machine
    assert not alive(before)
    assert good_preview_works(api)


@override_notifications(**SANDBOX, **HOLE)
def test_the_bomb_is_refused_at_accept_and_fails_a_digest_at_its_close(broker: dramatiq.Broker, api: APIClient) -> None:
    assert put_body(api, "bomb", BOMB).status_code == 201
    request = {"user_id": "u1", "to": "ann@example.com", "template": "bomb", "data": DATA}

    accepted = api.post("/api/v1/notifications", request, format="json")

    assert accepted.status_code == 400 and accepted.json()["error"]["code"] == "render_limit", accepted.content[:300]
    template = make_template("activity", subject="", body="{{ count }} updates", html_body="")
    client, _ = make_api_client()
    accept_notification(
        client, message="", template="activity", data=DATA, digest=services.DigestRequest(key="activity", window_seconds=60)
    )
    template.variants.update(body="{% with seed=items.0.seed s=items.0.s %}" + BOMB + "{% endwith %}")
    digest = Digest.objects.get()

    result = services.digest_close(digest_id=digest.pk, now=digest.closes_at)

    sent = Notification.objects.get(pk=result.notification_id)
    assert sent.status == Status.FAILED and "TEMPLATE_SANDBOX_MEMORY_BYTES" in sent.last_error


def test_the_bomb_fails_a_broadcasts_fan_out_in_the_workers_threads_as_render_limit(worker: dramatiq.Worker) -> None:
    client, token = make_api_client()
    template = make_template("launch", client=client, subject="Launch", body="Hello", html_body="")
    # Checked at accept in the default locale only: the French variant explodes for every subscriber who reads it.
    TemplateVariant.objects.create(template=template, channel="email", locale="fr", subject="Lancement", body=BOMB)
    services.topic_upsert(client=client, key="news", name="news")
    Recipient.objects.bulk_create(
        Recipient(client=client, user_id=f"u{n}", email=f"u{n}@example.com", locale="fr") for n in range(3)
    )
    services.topic_subscribe(client=client, key="news", user_ids=[f"u{n}" for n in range(3)])
    api = APIClient()
    api.credentials(HTTP_AUTHORIZATION=f"Bearer {token}")

    with override_notifications(**SANDBOX, **HOLE):
        response = api.post("/api/v1/broadcasts", {"topic": "news", "template": "launch", "data": DATA}, format="json")
        assert response.status_code == 202, response.content
        broadcast_id = response.json()["id"]
        wait_until(lambda: Broadcast.objects.get(pk=broadcast_id).status == "failed", timeout=30)

    broadcast = Broadcast.objects.get(pk=broadcast_id)
    assert broadcast.failure_reason.startswith(
        "the template's render was stopped: it used more than TEMPLATE_SANDBOX_MEMORY_BYTES"
    )


@override_notifications(TEMPLATE_SANDBOX_PROCESSES=2)
def test_threads_share_the_pool_and_each_gets_its_own_render(db: None) -> None:
    from notifications.services.policy.render_sandbox import template_job_run
    from notifications.services.policy.template_render import PartsRender

    results: dict[int, Any] = {}

    def render(n: int) -> None:
        job = PartsRender(
            sources=["", "{{ n }}:{{ n|add:1 }}", ""],
            html=[False, False, True],
            data={"n": n},
            seconds=1.0,
            remaining_seconds=1.0,
            max_bytes=1000,
            what="the template's render",
        )
        results[n] = template_job_run(job, owner=f"client:{n}")[1]

    threads = [threading.Thread(target=render, args=(n,)) for n in range(12)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)

    assert results == {n: f"{n}:{n + 1}" for n in range(12)}
    pool = current_sandbox()
    assert pool is not None and pool.started <= 2


@pytest.mark.parametrize("source", ["{% load static %}", "{{ x|ljust:'5000' }}"])
def test_the_store_time_check_runs_in_the_sandbox_and_refuses_with_a_400_naming_the_part(api: APIClient, source: str) -> None:
    response = put_body(api, "refused", source)

    assert response.status_code == 400
    assert (response.json()["error"]["code"], response.json()["error"]["field"]) == ("invalid", "variants[0].body")
    pool = current_sandbox()
    assert pool is not None and pool.limits.processes == 2 and pool.started >= 1  # the default


def _loop_job(seconds: float) -> Any:
    """A render that takes its whole budget of ``seconds``: 9 million loop steps, stopped there."""
    from notifications.services.policy.template_render import PartsRender

    return PartsRender(
        sources=["", "{% for x in a %}{% for y in a %}{% endfor %}{% endfor %}", ""],
        html=[False, False, True],
        data={"a": list(range(3000))},
        seconds=seconds,
        remaining_seconds=seconds,
        max_bytes=1000,
        what="the template's render",
    )


@override_notifications(TEMPLATE_SANDBOX_PROCESSES=2)
def test_one_clients_renders_that_take_their_whole_budget_leave_a_sandbox_process_to_another_client(db: None) -> None:
    from notifications.errors import RenderLimitExceeded
    from notifications.services.policy.render_sandbox import template_job_run
    from notifications.services.policy.template_render import PartsRender

    quick = PartsRender(
        sources=["", "{{ n }}", ""],
        html=[False, False, True],
        data={"n": 1},
        seconds=1.0,
        remaining_seconds=1.0,
        max_bytes=1000,
        what="the template's render",
    )
    # Both processes started first (a start is Django's set-up), so the wait below is only for turns.
    warm = [threading.Thread(target=template_job_run, args=(quick,), kwargs={"owner": f"client:{n}"}) for n in (8, 9)]
    for thread in warm:
        thread.start()
    for thread in warm:
        thread.join(timeout=60)
    pool = current_sandbox()
    assert pool is not None and pool.started == 2

    stopped: list[str] = []

    def hostile() -> None:
        try:
            template_job_run(_loop_job(2.0), owner="client:1")
        except RenderLimitExceeded as exc:
            stopped.append(exc.message)

    flood = [threading.Thread(target=hostile) for _ in range(4)]
    for thread in flood:
        thread.start()
    wait_until(lambda: pool.busy_owners().get("client:1", 0) >= 1, timeout=10, message="the flood's first render running")

    assert template_job_run(quick, owner="client:2")[1] == "1"
    # Served on the process the flood left free, not after one of the flood's 2 s renders.
    stopped_before_served = len(stopped)

    for thread in flood:
        thread.join(timeout=60)
    assert stopped_before_served == 0
    assert len(stopped) == 4 and pool.busy_owners() == {}
