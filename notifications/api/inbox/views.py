"""The inbox API: user tokens (with the client's token), and a user's feed, counts, marks and stream
tickets (with the user's token). The live stream is stream.py."""

from __future__ import annotations

from typing import Any, cast

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter
from rest_framework import serializers, status
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from ...channels.addresses import MAX_USER_ID_LENGTH
from ...models import inbox_item_fields
from ...selectors.inbox import ARCHIVED, STATUSES, inbox_counts, inbox_feed, inbox_feed_filter, inbox_items_of
from ...services import inbox as inbox_services
from ...services.inbox import BULK_ACTIONS, MAX_BULK_IDS, MAX_TOKEN_TTL_SECONDS, InboxUser
from ..schema import api_operation, request_example
from ..serializers import RefusesUnknownFields, StrictCharField
from ..views import _client, _require_object
from .auth import InboxUserAuthentication, InboxUserRateThrottle, IsInboxUser

USER_TOKEN_ANSWERS: dict[int, Any] = {
    401: "No inbox user token, or one that is not one (a client token), has expired or was revoked.",
}
MAX_PAGE = 100


class InboxTokenSerializer(RefusesUnknownFields, serializers.Serializer):  # type: ignore[type-arg]
    user_id = StrictCharField(max_length=MAX_USER_ID_LENGTH, help_text="Your own id of the user the token acts for.")
    ttl_seconds = serializers.IntegerField(
        min_value=1, max_value=MAX_TOKEN_TTL_SECONDS, default=3600, help_text="How long the token is good for; at most a day."
    )


class InboxTokenIssuedSerializer(serializers.Serializer):  # type: ignore[type-arg]
    token = serializers.CharField(
        help_text="Give it to the user's page: Authorization: Bearer (the stream: a ticket made with it, or ?token=)."
    )
    expires_at = serializers.DateTimeField()


class StreamTicketSerializer(serializers.Serializer):  # type: ignore[type-arg]
    ticket = serializers.CharField(help_text="Open GET /api/v1/inbox/stream?ticket= with it, once.")
    expires_at = serializers.DateTimeField(help_text="It opens no stream after this (a minute at most).")


class InboxCountsSerializer(serializers.Serializer):  # type: ignore[type-arg]
    unseen = serializers.IntegerField()
    unread = serializers.IntegerField()
    total = serializers.IntegerField(help_text="Items not archived.")


class InboxItemSerializer(serializers.Serializer):  # type: ignore[type-arg]
    id = serializers.UUIDField()
    notification_id = serializers.UUIDField()
    title = serializers.CharField(help_text="The notification's subject.")
    body = serializers.CharField()
    action_url = serializers.CharField(help_text="Where the item links to; empty for none.")
    category = serializers.CharField()
    thread_key = serializers.CharField()
    data = serializers.DictField(help_text="The notification's metadata.")  # type: ignore[assignment]
    created_at = serializers.DateTimeField()
    seen_at = serializers.DateTimeField(allow_null=True)
    read_at = serializers.DateTimeField(allow_null=True)
    archived_at = serializers.DateTimeField(allow_null=True)


class InboxFeedSerializer(serializers.Serializer):  # type: ignore[type-arg]
    items = InboxItemSerializer(many=True)
    next_cursor = serializers.CharField(allow_null=True, help_text="Give it as cursor for the next page; null on the last.")
    counts = InboxCountsSerializer()


class InboxFeedQuerySerializer(RefusesUnknownFields, serializers.Serializer):  # type: ignore[type-arg]
    status = serializers.ChoiceField(choices=STATUSES, default="all")
    archived = serializers.ChoiceField(choices=ARCHIVED, default="exclude")
    category = StrictCharField(max_length=64, required=False, default="")
    thread = StrictCharField(max_length=255, required=False, default="")
    cursor = StrictCharField(max_length=200, required=False, default="")
    limit = serializers.IntegerField(min_value=1, max_value=MAX_PAGE, default=20)


class InboxBulkSerializer(RefusesUnknownFields, serializers.Serializer):  # type: ignore[type-arg]
    action = serializers.ChoiceField(choices=BULK_ACTIONS)
    ids = serializers.ListField(child=serializers.UUIDField(), required=False, max_length=MAX_BULK_IDS)
    before = serializers.DateTimeField(required=False, help_text="Only items created before this moment.")
    category = StrictCharField(max_length=64, required=False, default="")


class InboxBulkResultSerializer(serializers.Serializer):  # type: ignore[type-arg]
    changed = serializers.IntegerField(help_text="Items whose state this changed.")
    counts = InboxCountsSerializer()


def _user(request: Request) -> InboxUser:
    return cast(InboxUser, request.user)


def _counts(user: InboxUser) -> dict[str, int]:
    return inbox_counts(client_id=user.client.pk, user_id=user.user_id).as_dict()


class InboxUserView(APIView):
    authentication_classes = [InboxUserAuthentication]
    permission_classes = [IsInboxUser]
    throttle_classes = [InboxUserRateThrottle]


class InboxTokensView(APIView):
    @api_operation(
        "inbox_token_create",
        {201: InboxTokenIssuedSerializer, 400: "user_id missing or over 255 characters, or ttl_seconds not 1 to 86,400."},
        request=InboxTokenSerializer,
        summary="Make an inbox token for a user",
        description="A signed token that lets one user's page read and mark that user's inbox (and only theirs) until "
        "it expires, at most a day later. Call it from your server with your client token and hand the token to "
        "the page; DELETE revokes the user's tokens.",
        examples=[request_example("A one-hour token", {"user_id": "user-42", "ttl_seconds": 3600})],
    )
    def post(self, request: Request) -> Response:
        serializer = InboxTokenSerializer(data=_require_object(request.data))
        serializer.is_valid(raise_exception=True)
        token, expires_at = inbox_services.inbox_token_issue(client=_client(request), **serializer.validated_data)
        return Response(
            {"token": token, "expires_at": expires_at.isoformat().replace("+00:00", "Z")},
            status=status.HTTP_201_CREATED,
            headers={"Cache-Control": "no-store"},
        )

    @api_operation(
        "inbox_token_revoke",
        {204: None, 400: "user_id missing or over 255 characters."},
        parameters=[OpenApiParameter("user_id", str, OpenApiParameter.QUERY, required=True)],
        summary="Revoke a user's inbox tokens",
        description="Every token of the user issued before now is refused from the next request on (401); tokens made "
        "after this call are good. Streams open with a revoked token are closed at their next event or heartbeat.",
    )
    def delete(self, request: Request) -> Response:
        user_id = request.query_params.get("user_id", "")
        if not user_id or len(user_id) > MAX_USER_ID_LENGTH or "\x00" in user_id:
            raise serializers.ValidationError({"user_id": ["give the user_id, 1 to 255 characters"]})
        inbox_services.inbox_tokens_revoke(client=_client(request), user_id=user_id)
        return Response(status=status.HTTP_204_NO_CONTENT)


class InboxStreamTicketsView(InboxUserView):
    @api_operation(
        "inbox_stream_ticket_create",
        {201: StreamTicketSerializer, **USER_TOKEN_ANSWERS},
        summary="Make a ticket that opens the user's stream",
        description="A one-use ticket for GET /api/v1/inbox/stream?ticket=, good for a minute: EventSource cannot "
        "send a header, and a ticket in a URL is worth nothing once used, where a token would be. The stream it opens "
        "ends when the token it was made with expires or is revoked. No body.",
    )
    def post(self, request: Request) -> Response:
        ticket, expires_at = inbox_services.inbox_stream_ticket_issue(user=_user(request))
        return Response(
            {"ticket": ticket, "expires_at": expires_at.isoformat().replace("+00:00", "Z")},
            status=status.HTTP_201_CREATED,
            headers={"Cache-Control": "no-store"},
        )


class InboxItemsView(InboxUserView):
    @api_operation(
        "inbox_items_list",
        {
            200: InboxFeedSerializer,
            400: "A parameter out of its range, or a cursor this feed did not give.",
            **USER_TOKEN_ANSWERS,
        },
        parameters=[InboxFeedQuerySerializer],
        summary="List the user's inbox",
        description="The user's items newest first, a page at a time (next_cursor), with their counts. status: unseen, "
        "unread or all; archived: exclude (default), include or only; category and thread filter.",
    )
    def get(self, request: Request) -> Response:
        query = InboxFeedQuerySerializer(data=request.query_params.dict())
        query.is_valid(raise_exception=True)
        params, user = query.validated_data, _user(request)
        items = inbox_feed_filter(
            inbox_items_of(client_id=user.client.pk, user_id=user.user_id),
            status=params["status"],
            archived=params["archived"],
            category=params["category"],
            thread=params["thread"],
        )
        page = inbox_feed(items=items, cursor=params["cursor"], limit=params["limit"])
        return Response(
            {"items": [inbox_item_fields(item) for item in page.items], "next_cursor": page.next_cursor, "counts": _counts(user)}
        )


class InboxCountsView(InboxUserView):
    @api_operation(
        "inbox_counts",
        {200: InboxCountsSerializer, **USER_TOKEN_ANSWERS},
        summary="Count the user's inbox",
        description="Unseen, unread and total (not archived) items: kept with every change, so one row read.",
    )
    def get(self, request: Request) -> Response:
        return Response(_counts(_user(request)))


class InboxItemActionView(InboxUserView):
    @api_operation(
        "inbox_item_mark",
        {
            200: InboxItemSerializer,
            404: "The user has no item with this id (another user's is not theirs).",
            **USER_TOKEN_ANSWERS,
        },
        parameters=[
            OpenApiParameter("item_id", OpenApiTypes.UUID, OpenApiParameter.PATH),
            OpenApiParameter("action", str, OpenApiParameter.PATH, enum=list(inbox_services.ACTIONS)),
        ],
        summary="Mark one item",
        description="seen, read (seen too), unread, archive or unarchive one of the user's items; the item as it now is. "
        "Marking an item already in that state changes nothing.",
    )
    def post(self, request: Request, item_id: str, action: str) -> Response:
        item = inbox_services.inbox_item_mark(user=_user(request), item_id=item_id, action=action)
        return Response(inbox_item_fields(item))


class InboxBulkView(InboxUserView):
    @api_operation(
        "inbox_bulk_mark",
        {
            200: InboxBulkResultSerializer,
            400: "An action other than seen, read or archive, or a bad filter.",
            **USER_TOKEN_ANSWERS,
        },
        request=InboxBulkSerializer,
        examples=[
            request_example("Mark all read", {"action": "read"}),
            request_example(
                "Archive a category's older items",
                {"action": "archive", "category": "marketing", "before": "2026-01-01T00:00:00Z"},
            ),
        ],
        summary="Mark many items",
        description="seen, read or archive the user's items matching every filter given (ids, created before, "
        "category); with no filter, all of them. Answers how many changed and the counts after.",
    )
    def post(self, request: Request) -> Response:
        serializer = InboxBulkSerializer(data=_require_object(request.data))
        serializer.is_valid(raise_exception=True)
        data, user = serializer.validated_data, _user(request)
        changed = inbox_services.inbox_items_bulk_mark(
            user=user,
            action=data["action"],
            ids=[str(pk) for pk in data["ids"]] if "ids" in data else None,
            before=data.get("before"),
            category=data["category"],
        )
        return Response({"changed": changed, "counts": _counts(user)})
