"""Routes of the v1 API."""

from django.urls import path

from . import views

urlpatterns = [
    path("notifications", views.NotificationCollectionView.as_view(), name="notification-list"),
    path("notifications/batch", views.NotificationBatchView.as_view(), name="notification-batch"),
    path("notifications/<str:notification_id>", views.NotificationDetailView.as_view(), name="notification-detail"),
    path("notifications/<str:notification_id>/cancel", views.NotificationCancelView.as_view(), name="notification-cancel"),
    path("recipients/<str:user_id>", views.RecipientView.as_view(), name="recipient-detail"),
]
