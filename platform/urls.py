"""Top-level routes: API, health probes, OpenAPI, admin, metrics."""

from pathlib import Path

from django.contrib import admin
from django.http import HttpRequest, HttpResponse
from django.urls import include, path
from django.views.generic import RedirectView
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerView

from notifications.api.consent.unsubscribe import UnsubscribeView
from notifications.api.health import LivenessView, ReadinessView
from notifications.api.inbox.demo import inbox_demo, inbox_demo_send, inbox_demo_token
from notifications.metrics import web_metrics_export

# Browsers ask every page's origin for /favicon.ico; a 404 there is an error in each page's console.
_FAVICON = (Path(__file__).resolve().parent.parent / "notifications" / "static" / "notifications" / "favicon.ico").read_bytes()


def favicon(request: HttpRequest) -> HttpResponse:
    return HttpResponse(_FAVICON, content_type="image/x-icon", headers={"Cache-Control": "public, max-age=86400"})


urlpatterns = [
    # The address runserver prints and the admin's "View site" links to: the API's own docs.
    path("", RedirectView.as_view(pattern_name="api-docs"), name="home"),
    path("api/v1/", include("notifications.api.urls")),
    path("api/schema/", SpectacularAPIView.as_view(), name="schema"),
    path("api/docs/", SpectacularSwaggerView.as_view(url_name="schema"), name="api-docs"),
    path("healthz", LivenessView.as_view(), name="healthz"),
    path("readyz", ReadinessView.as_view(), name="readyz"),
    path("admin/", admin.site.urls),
    # One-click unsubscribe (RFC 8058): the List-Unsubscribe link of every non-critical email.
    path("u/<str:token>", UnsubscribeView.as_view(), name="unsubscribe"),
    # Only the web process loads the URLconf, so only it reads queue sizes and dlq_size on a scrape.
    path("metrics", web_metrics_export, name="prometheus-django-metrics"),
    path("favicon.ico", favicon, name="favicon"),
    # <ntf-inbox> with a demo user (DEBUG or INBOX_DEMO; a 404 otherwise).
    path("inbox/demo/", inbox_demo, name="inbox-demo"),
    path("inbox/demo/token", inbox_demo_token, name="inbox-demo-token"),
    path("inbox/demo/send", inbox_demo_send, name="inbox-demo-send"),
]
