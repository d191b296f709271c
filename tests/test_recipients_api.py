"""PUT/GET/DELETE /api/v1/recipients/{user_id}."""

from __future__ import annotations

from rest_framework.test import APIClient

from .factories import make_api_client

URL = "/api/v1/recipients"


def test_put_creates_then_replaces_and_get_reads_it(api: APIClient) -> None:
    body = {
        "email": "ann@example.com",
        "phone": "+14155550123",
        "push_tokens": ["tok-1"],
        "locale": "en-GB",
        "timezone": "Europe/London",
    }
    created = api.put(f"{URL}/ann", body, format="json")
    assert created.status_code == 201
    assert created.json()["email"] == "ann@example.com"
    replaced = api.put(f"{URL}/ann", {"email": "new@example.com"}, format="json")
    assert replaced.status_code == 200
    read = api.get(f"{URL}/ann").json()
    assert read["email"] == "new@example.com" and read["phone"] == "" and read["push_tokens"] == []


def test_bad_addresses_are_400_naming_the_field(api: APIClient) -> None:
    cases = [
        ({"email": "nope"}, "email"),
        ({"phone": "0123"}, "phone"),
        ({"webhook_url": "notaurl"}, "webhook_url"),
        ({"timezone": "Mars/Olympus"}, "timezone"),
        ({"push_tokens": "tok"}, "push_tokens"),
    ]
    for body, field in cases:
        response = api.put(f"{URL}/bob", body, format="json")
        assert response.status_code == 400, (body, response.content)
        assert response.json()["error"]["field"] == field


def test_delete_removes_and_other_clients_cannot_see_it(api: APIClient) -> None:
    api.put(f"{URL}/cy", {"email": "cy@example.com"}, format="json")
    _, other_token = make_api_client("other")
    other = APIClient()
    other.credentials(HTTP_AUTHORIZATION=f"Bearer {other_token}")
    assert other.get(f"{URL}/cy").status_code == 404
    assert other.delete(f"{URL}/cy").status_code == 404
    assert api.delete(f"{URL}/cy").status_code == 204
    assert api.get(f"{URL}/cy").status_code == 404


def test_a_path_user_id_too_long_or_with_nul_is_400_not_500(api: APIClient) -> None:
    for user_id in ("u" * 256, "a%00b"):
        put = api.put(f"{URL}/{user_id}", {"email": "a@example.com"}, format="json")
        assert put.status_code == 400, (user_id, put.content)
        assert put.json()["error"]["field"] == "user_id"
        assert api.get(f"{URL}/{user_id}").status_code == 400
        assert api.delete(f"{URL}/{user_id}").status_code == 400
    assert api.put(f"{URL}/{'u' * 255}", {"email": "a@example.com"}, format="json").status_code == 201


def test_a_stored_push_token_is_bounded_by_what_a_notification_can_hold(api: APIClient) -> None:
    assert api.put(f"{URL}/dee", {"push_tokens": ["t" * 2001]}, format="json").json()["error"]["field"].startswith("push_tokens")
    assert api.put(f"{URL}/dee", {"push_tokens": ["t"] * 101}, format="json").status_code == 400
    assert api.put(f"{URL}/dee", {"push_tokens": ["t" * 2000]}, format="json").status_code == 201
    sent = api.post("/api/v1/notifications", {"user_id": "dee", "channel": "push", "message": "hi"}, format="json")
    assert sent.status_code == 202, sent.content
