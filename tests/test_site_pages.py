"""What a browser or a support agent meets outside the API: the favicon, the admin index's entries."""

from __future__ import annotations

from typing import Any

import pytest
from rest_framework.test import APIClient

pytestmark = pytest.mark.django_db


def test_favicon_is_served_as_an_icon() -> None:
    response = APIClient().get("/favicon.ico")
    assert response.status_code == 200 and response["Content-Type"] == "image/x-icon"
    assert response.content[:4] == b"\x00\x00\x01\x00"  # an ICO header


def test_the_admin_index_has_no_dramatiq_tasks_page(django_user_model: Any, client: Any) -> None:
    staff = django_user_model.objects.create_superuser("root", "root@example.com", "pw-Long-enough-1")
    client.force_login(staff)
    page = client.get("/admin/").content.decode()
    assert "Notifications" in page and "Tasks" not in page and "django_dramatiq" not in page


def test_the_site_root_leads_to_the_api_docs() -> None:
    response = APIClient().get("/")
    assert response.status_code == 302 and response["Location"] == "/api/docs/"
    assert APIClient().get(response["Location"]).status_code == 200


def test_the_admins_view_site_link_reaches_a_page(django_user_model: Any, client: Any) -> None:
    staff = django_user_model.objects.create_superuser("root", "root@example.com", "pw-Long-enough-1")
    client.force_login(staff)
    assert 'href="/"' in client.get("/admin/").content.decode()
    assert client.get("/", follow=True).status_code == 200
