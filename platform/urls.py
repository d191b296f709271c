"""Top-level routes: API, health probes, OpenAPI, admin, metrics."""

from django.contrib import admin
from django.urls import include, path
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerView

from notifications.api.views import LivenessView, ReadinessView
from notifications.metrics import register_scrape_time_collector

# Only the web process loads the URLconf, so only it reads queue sizes and dlq_size on a scrape.
register_scrape_time_collector()

urlpatterns = [
    path("api/v1/", include("notifications.api.urls")),
    path("api/schema/", SpectacularAPIView.as_view(), name="schema"),
    path("api/docs/", SpectacularSwaggerView.as_view(url_name="schema"), name="api-docs"),
    path("healthz", LivenessView.as_view(), name="healthz"),
    path("readyz", ReadinessView.as_view(), name="readyz"),
    path("admin/", admin.site.urls),
    path("", include("django_prometheus.urls")),
]
