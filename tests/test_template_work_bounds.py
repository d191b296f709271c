"""Every template operation pays the render's budget (issue #36): a filter call takes a step (the
deadline) and counts what it makes, {% regroup %} steps per item, and the values a node keeps
({% with %}'s, {% regroup %}'s groupers) are counted unless the data holds them, so the work one
node does (a regroup's expression for every item, a {% with %} of many values, made by filters or
by a lookup calling a method, a long chain of filters in a cycle or a widthratio) stops at the
budget. Each attack renders at preview, at accept and at a
digest's close (a worker's delivery of it): stopped within 2 s, the process's resident memory peak under 64 MB above where it was."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import dramatiq
import pytest
from rest_framework.test import APIClient

from notifications import services
from notifications.models import Digest, Notification, Status
from notifications.services.policy.templates import template_source_check

from .factories import accept_notification, make_api_client, make_template
from .test_template_bounds import preview, put_body

MB = 1024 * 1024


def doubled(levels: int) -> tuple[str, str]:
    """{% with %} tags that double ``seed`` ``levels`` times into ``b<levels>``, and their ends:
    each value within MAX_MESSAGE_BYTES (so within the bounds a filter's result is held to)."""
    opens = "{% with b0=seed %}" + "".join(f"{{% with b{i}=b{i - 1}|add:b{i - 1} %}}" for i in range(1, levels + 1))
    return opens, "{% endwith %}" * (levels + 1)


OPEN, CLOSE = doubled(12)  # b12: 32 KB of HTML from a seed of 8 characters
BIG = "b12"
# Each step adds 32 KB of HTML and strips its tags (about 15 ms), then keeps one character.
HEAVY_STEPS = ("|add:" + BIG + '|striptags|slice:":1"') * 400
ATTACKS = {
    # The memory bomb: one grouper of 32 KB kept per item, 8,000 items, in one node.
    "regroup-memory": "{% regroup s|make_list by upper|add:" + BIG + " as G %}{{ G|length }}",
    # The time bomb: the add/slice pairs run for every item within the one node.
    "regroup-time": "{% regroup s|make_list by upper" + ("|add:" + BIG + '|slice:":1"') * 60 + " as G %}{{ G|length }}",
    # 2,000 sorted copies of a list of 8,000 groups, each sorted by a Python key, held by one node.
    "dictsort": "{% regroup s|make_list by upper as R %}{% with "
    + " ".join(f'd{i}=R|dictsort:"grouper"' for i in range(2000))
    + " %}{{ d0|length }}{% endwith %}",
    "join": "{% regroup s|make_list by upper|add:" + BIG + '|make_list|join:"" as G %}{{ G|length }}',
    # A {% with %} of 1,800 values of 64 KB each: one node holding 115 MB.
    "slice-with": "{% with "
    + " ".join(f'v{i}={BIG}|add:{BIG}|slice:":-1"' for i in range(1800))
    + " %}{{ v0|length }}{% endwith %}",
    "nested-with": "".join(
        "{% with " + " ".join(f'w{d}_{i}={BIG}|add:{BIG}|slice:":-1"' for i in range(120)) + " %}" for d in range(15)
    )
    + "x"
    + "{% endwith %}" * 15,
    # Values made by calling a method of a value (no filter): 3,000 of 64,000 characters in one node.
    "method-with": "{% with t=s|add:s %}{% with "
    + " ".join(f"m{i}=t.expandtabs" for i in range(3000))
    + " %}{{ m0|length }}{% endwith %}{% endwith %}",
    "cycle": "{% cycle " + BIG + HEAVY_STEPS + ' "b" as c silent %}{{ c|length }}',
    "widthratio": "{% widthratio " + BIG + HEAVY_STEPS + " 1 1 %}",
}
DATA = {"seed": "<i>x</i>", "s": "a\t" * 4000}  # 12 KB as JSON: data is at most 16 KB


def _memory_kb(field: str) -> int:
    with open("/proc/self/status") as status:
        return next(int(line.split()[1]) for line in status if line.startswith(field + ":"))


def measured(call: Callable[[], Any]) -> tuple[Any, float, int]:
    """``call``'s result, its seconds, and how far the process's resident memory rose above where
    it started at its peak during the call, in bytes: Linux's high-water mark (VmHWM), reset to
    the current resident size first ("5" to /proc/self/clear_refs). The whole process, measured
    by the kernel at no cost to the call (tracemalloc would slow a render several times)."""
    with open("/proc/self/clear_refs", "w") as clear_refs:
        clear_refs.write("5")
    before = _memory_kb("VmRSS")
    started = time.monotonic()
    result = call()
    seconds = time.monotonic() - started
    return result, seconds, (_memory_kb("VmHWM") - before) * 1024


def test_each_attack_is_within_the_bounds_a_template_is_checked_against_when_stored() -> None:
    for name, attack in ATTACKS.items():
        template_source_check(OPEN + attack + CLOSE, field=name, owner="client:1")  # raises ValidationFailed when refused


@pytest.mark.parametrize("attack", ATTACKS.values(), ids=ATTACKS.keys())
def test_an_attack_is_stopped_at_its_budget_at_preview_within_2_s_and_64_mb(api: APIClient, attack: str) -> None:
    assert put_body(api, "attack", OPEN + attack + CLOSE).status_code == 201

    response, seconds, peak = measured(lambda: preview(api, "attack", DATA))

    assert response.status_code == 400, response.content[:300]
    assert (response.json()["error"]["code"], response.json()["error"]["field"]) == ("render_limit", "template")
    assert seconds < 2, seconds
    assert peak < 64 * MB, peak


@pytest.mark.parametrize("attack", ATTACKS.values(), ids=ATTACKS.keys())
def test_an_attack_is_stopped_at_its_budget_at_accept_within_2_s_and_64_mb(api: APIClient, attack: str) -> None:
    assert put_body(api, "attack", OPEN + attack + CLOSE).status_code == 201
    request = {"user_id": "u1", "to": "ann@example.com", "template": "attack", "data": DATA}

    response, seconds, peak = measured(lambda: api.post("/api/v1/notifications", request, format="json"))

    assert response.status_code == 400, response.content[:300]
    assert response.json()["error"]["code"] == "render_limit"
    assert seconds < 2, seconds
    assert peak < 64 * MB, peak
    assert not Notification.objects.exists()


@pytest.mark.parametrize("attack", ATTACKS.values(), ids=ATTACKS.keys())
def test_an_attack_is_stopped_at_its_budget_at_a_digests_close_which_fails_saying_so(
    broker: dramatiq.Broker, db: None, attack: str
) -> None:
    template = make_template("activity", subject="", body="{{ count }} updates", html_body="")
    client, _ = make_api_client()
    accept_notification(
        client, message="", template="activity", data=DATA, digest=services.DigestRequest(key="activity", window_seconds=60)
    )
    # The attack as the digest sees its data: the one member's, as items.0 (a template edited since).
    members = "{% with seed=items.0.seed s=items.0.s %}"
    template.variants.update(body=members + OPEN + attack + CLOSE + "{% endwith %}")
    digest = Digest.objects.get()

    result, seconds, peak = measured(lambda: services.digest_close(digest_id=digest.pk, now=digest.closes_at))

    sent = Notification.objects.get(pk=result.notification_id)
    assert sent.status == Status.FAILED
    assert "exceeded" in sent.last_error or "made more than" in sent.last_error, sent.last_error
    assert seconds < 2, seconds
    assert peak < 64 * MB, peak
