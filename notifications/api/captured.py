"""The test mode API: the messages a test token's notifications would have sent, captured."""

from __future__ import annotations

from typing import Any

from rest_framework import serializers, status
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from .. import selectors, services
from ..models import CapturedMessage
from .auth import IsTestToken
from .pagination import NewestFirstPagination
from .schema import api_operation
from .views import _client

LIVE_TOKEN = "A live token: its messages are sent, not captured; only a test token (ntf_test_...) has captured messages."


class CapturedMessageSerializer(serializers.ModelSerializer):  # type: ignore[type-arg]
    notification_id: serializers.PrimaryKeyRelatedField[Any] = serializers.PrimaryKeyRelatedField(
        source="notification", read_only=True, help_text="The notification that would have sent it."
    )

    class Meta:
        model = CapturedMessage
        fields = ["notification_id", "channel", "to", "subject", "body", "html_body", "captured_at"]


class NewestCapturedFirstPagination(NewestFirstPagination):
    ordering = ("-captured_at", "-id")


class CapturedMessageCollectionView(APIView):
    permission_classes = [IsTestToken]
    pagination_class = NewestCapturedFirstPagination

    @api_operation(
        "test_messages_list",
        {
            200: CapturedMessageSerializer(many=True),
            400: "page_size is invalid or the cursor empty; `field` names it.",
            403: LIVE_TOKEN,
            404: "The cursor names no page (cursors come only from a page's next and previous links).",
        },
        summary="List captured messages",
        description="Test mode sends nothing: every channel's provider is replaced by a capture sink, and each "
        "message a notification of this test token would have sent is kept here as rendered (subject, body, the "
        "email's HTML part), newest first, a page at a time. Everything else ran as in live mode: validation, "
        "templates, preferences, quiet hours, caps, digests, routing, suppressions and status webhooks. Reserved "
        "addresses force outcomes (docs/integrations.md): bounce@test.invalid, complaint@test.invalid, "
        "fail@test.invalid, +15005550001, push token test-unregistered.",
    )
    def get(self, request: Request) -> Response:
        paginator = self.pagination_class()
        page = paginator.paginate_queryset(selectors.captured_message_list(client=_client(request)), request, view=self)
        return paginator.get_paginated_response(CapturedMessageSerializer(page, many=True).data)

    @api_operation(
        "test_messages_clear",
        {204: None, 403: LIVE_TOKEN},
        summary="Empty the captured messages",
        description="Removes every message captured for this test token's client (its test mode), e.g. between two "
        "runs of an integration's tests. Its notifications stay.",
    )
    def delete(self, request: Request) -> Response:
        services.captured_messages_clear(client=_client(request))
        return Response(status=status.HTTP_204_NO_CONTENT)
