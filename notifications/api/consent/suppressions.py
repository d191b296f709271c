"""The suppression list API: the client's suppressed addresses, and taking one off the list."""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import OpenApiParameter
from rest_framework import serializers, status
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from ... import selectors, services
from ...models import Channel, Suppression
from ..pagination import NewestFirstPagination
from ..schema import api_operation
from ..views import _client


class SuppressionSerializer(serializers.ModelSerializer):  # type: ignore[type-arg]
    notification: serializers.PrimaryKeyRelatedField[Any] = serializers.PrimaryKeyRelatedField(
        read_only=True, allow_null=True, help_text="The notification whose provider feedback added it (null once purged)."
    )

    class Meta:
        model = Suppression
        fields = ["channel", "address", "reason", "created_at", "notification"]


class SuppressionFilterSerializer(serializers.Serializer):  # type: ignore[type-arg]
    channel = serializers.ChoiceField(choices=Channel.choices, required=False)
    # 1000, not the column's 2000: percent-encoded, a longer one can pass the web server's 4 KB
    # request line limit (a 414), and no email address, phone number or FCM token is that long.
    address = serializers.CharField(required=False, max_length=1000, trim_whitespace=False, help_text="Matched exactly.")

    def to_internal_value(self, data: Any) -> Any:
        # As for the notification list: an empty value would silently not filter.
        for name, _field in self.fields.items():
            if name in data and data.get(name) == "":
                raise serializers.ValidationError({name: ["may not be empty; leave the parameter out to not filter by it"]})
        return super().to_internal_value(data)


class SuppressionChannelSerializer(serializers.Serializer):  # type: ignore[type-arg]
    channel = serializers.ChoiceField(
        choices=Channel.choices, required=False, help_text="Only on this channel; left out, on every channel."
    )


class SuppressionAddressSerializer(serializers.Serializer):  # type: ignore[type-arg]
    # The column's length; CharField refuses a NUL, which PostgreSQL cannot compare with text.
    address = serializers.CharField(max_length=2000, trim_whitespace=False)


class SuppressionCollectionView(APIView):
    pagination_class = NewestFirstPagination

    @api_operation(
        "suppressions_list",
        {
            200: SuppressionSerializer(many=True),
            400: "A filter or page_size is invalid or empty; `field` names it.",
            404: "The cursor names no page (cursors come only from a page's next and previous links).",
        },
        parameters=[SuppressionFilterSerializer],
        summary="List suppressed addresses",
        description="The addresses this client does not send to, newest first, a page at a time: added by a "
        "provider's feedback (a hard bounce, a spam complaint, an SMS STOP, an unregistered push token). A "
        "notification to one is not sent (status suppressed, suppressed_reason the list's reason).",
    )
    def get(self, request: Request) -> Response:
        filters = SuppressionFilterSerializer(data=request.query_params)
        filters.is_valid(raise_exception=True)
        queryset = selectors.suppression_list(client=_client(request), **filters.validated_data)
        paginator = self.pagination_class()
        page = paginator.paginate_queryset(queryset, request, view=self)
        return paginator.get_paginated_response(SuppressionSerializer(page, many=True).data)


class SuppressionDetailView(APIView):
    @api_operation(
        "suppressions_delete",
        {
            204: None,
            400: "The channel is not one of ours, or the address is not one (a NUL, over 2000 characters); `field` names it.",
            404: "This client has no suppression of this address (on this channel).",
        },
        parameters=[
            OpenApiParameter("address", str, OpenApiParameter.PATH, description="The address exactly as listed."),
            SuppressionChannelSerializer,
        ],
        summary="Take an address off the suppression list",
        description="Sends to the address again (on one channel, or on every channel when none is given), e.g. once "
        "the recipient has fixed their mailbox.",
    )
    def delete(self, request: Request, address: str) -> Response:
        SuppressionAddressSerializer(data={"address": address}).is_valid(raise_exception=True)
        query = SuppressionChannelSerializer(data=request.query_params)
        query.is_valid(raise_exception=True)
        services.suppression_remove(client=_client(request), address=address, channel=query.validated_data.get("channel", ""))
        return Response(status=status.HTTP_204_NO_CONTENT)
