"""Top-level routes: API, health probes, OpenAPI, admin, metrics."""

from django.contrib import admin
from django.urls import include, path
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerView

from notifications.api.unsubscribe import UnsubscribeView
from notifications.api.views import LivenessView, ReadinessView
from notifications.metrics import web_metrics_export

urlpatterns = [
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
]
