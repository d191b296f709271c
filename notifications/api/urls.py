"""Routes of the v1 API."""

from django.urls import path

from . import categories, preferences, templates, views

urlpatterns = [
    path("notifications", views.NotificationCollectionView.as_view(), name="notification-list"),
    path("notifications/batch", views.NotificationBatchView.as_view(), name="notification-batch"),
    path("notifications/<str:notification_id>", views.NotificationDetailView.as_view(), name="notification-detail"),
    path("notifications/<str:notification_id>/cancel", views.NotificationCancelView.as_view(), name="notification-cancel"),
    path("recipients/<str:user_id>", views.RecipientView.as_view(), name="recipient-detail"),
    path("recipients/<str:user_id>/preferences", preferences.PreferencesView.as_view(), name="recipient-preferences"),
    path("templates/<str:key>", templates.TemplateView.as_view(), name="template-detail"),
    path("templates/<str:key>/preview", templates.TemplatePreviewView.as_view(), name="template-preview"),
    path("categories/<str:key>", categories.CategoryView.as_view(), name="category-detail"),
]
