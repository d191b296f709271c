"""Routes of the v1 API."""

from django.urls import include, path

from ..channels import CHANNELS
from . import captured, client, recipients, templates, views
from .consent import categories, preferences, suppressions
from .fanout import broadcasts, topics
from .inbox import stream as inbox_stream
from .inbox import views as inbox

urlpatterns = [
    path("notifications", views.NotificationCollectionView.as_view(), name="notification-list"),
    path("notifications/batch", views.NotificationBatchView.as_view(), name="notification-batch"),
    path("notifications/<str:notification_id>", views.NotificationDetailView.as_view(), name="notification-detail"),
    path("notifications/<str:notification_id>/cancel", views.NotificationCancelView.as_view(), name="notification-cancel"),
    path("recipients/<str:user_id>", recipients.RecipientView.as_view(), name="recipient-detail"),
    path("recipients/<str:user_id>/preferences", preferences.PreferencesView.as_view(), name="recipient-preferences"),
    path("templates/<str:key>", templates.TemplateView.as_view(), name="template-detail"),
    path("templates/<str:key>/preview", templates.TemplatePreviewView.as_view(), name="template-preview"),
    path("categories/<str:key>", categories.CategoryView.as_view(), name="category-detail"),
    path("topics/<str:key>", topics.TopicView.as_view(), name="topic-detail"),
    path("topics/<str:key>/subscribers", topics.TopicSubscribersView.as_view(), name="topic-subscribers"),
    path("topics/<str:key>/subscribers/<str:user_id>", topics.TopicSubscriberView.as_view(), name="topic-subscriber"),
    path("broadcasts", broadcasts.BroadcastCollectionView.as_view(), name="broadcast-list"),
    path("broadcasts/<str:broadcast_id>", broadcasts.BroadcastDetailView.as_view(), name="broadcast-detail"),
    path("broadcasts/<str:broadcast_id>/cancel", broadcasts.BroadcastCancelView.as_view(), name="broadcast-cancel"),
    path("suppressions", suppressions.SuppressionCollectionView.as_view(), name="suppression-list"),
    path("suppressions/<str:address>", suppressions.SuppressionDetailView.as_view(), name="suppression-detail"),
    # Providers reporting delivery status, authenticated by their own signatures (no API token):
    # each channel's own routes (channels/<name>/callbacks.py), named by its registry entry.
    *[path("", include(spec.callbacks)) for spec in CHANNELS.values() if spec.callbacks],
    path("inbox/tokens", inbox.InboxTokensView.as_view(), name="inbox-tokens"),
    path("inbox/items", inbox.InboxItemsView.as_view(), name="inbox-items"),
    path("inbox/items/<str:item_id>/<str:action>", inbox.InboxItemActionView.as_view(), name="inbox-item-action"),
    path("inbox/counts", inbox.InboxCountsView.as_view(), name="inbox-counts"),
    path("inbox/bulk", inbox.InboxBulkView.as_view(), name="inbox-bulk"),
    path("inbox/stream", inbox_stream.inbox_stream, name="inbox-stream"),
    path("inbox/stream/tickets", inbox.InboxStreamTicketsView.as_view(), name="inbox-stream-tickets"),
    path("client", client.ClientView.as_view(), name="client-detail"),
    path("client/webhook-secret", client.ClientWebhookSecretView.as_view(), name="client-webhook-secret"),
    path("test/messages", captured.CapturedMessageCollectionView.as_view(), name="test-messages"),
]
