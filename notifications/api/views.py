"""Thin API views: parse the request, call one service, shape the answer."""

from __future__ import annotations

import logging
import uuid
from typing import Any, cast

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiExample, OpenApiParameter, OpenApiResponse
from rest_framework import serializers, status
from rest_framework.exceptions import APIException
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from .. import selectors, services
from ..errors import NotificationError, ValidationFailed
from ..models import ApiClient
from .exceptions import api_exception_handler, database_unavailable, unhandled_error
from .pagination import NewestFirstPagination
from .schema import api_operation, request_example
from .serializers import (
    MAX_BATCH,
    AcceptedSerializer,
    BatchCreateSerializer,
    BatchResultSerializer,
    NotificationCreateSerializer,
    NotificationDetailSerializer,
    NotificationFilterSerializer,
    NotificationSerializer,
)

IDEMPOTENCY_HEADER = OpenApiParameter(
    "Idempotency-Key",
    str,
    OpenApiParameter.HEADER,
    required=False,
    description="Makes the request safe to repeat: the same key and body replay the first answer.",
)
REPLAYED_HEADER = OpenApiParameter(
    "Idempotent-Replayed",
    OpenApiTypes.STR,
    OpenApiParameter.HEADER,
    enum=["true"],
    response=[202],
    description="Present on a replay: the answer is the first request's, and nothing new was accepted.",
)
MAX_KEY_LENGTH = 255  # IdempotencyKey.key and Recipient.user_id are varchar(255)
USER_ID = OpenApiParameter(
    "user_id",
    str,
    OpenApiParameter.PATH,
    description="Your own id of the recipient, 1 to 255 characters.",
    examples=[OpenApiExample("user-42", value="user-42")],
)

logger = logging.getLogger("notifications.api")
NOT_FOUND = "This client has no notification with this id."
BAD_USER_ID = "The user_id is over 255 characters or holds NUL."
BAD_CONTENT = (
    "A field, or the Idempotency-Key header, is invalid; `field` names it. Code invalid, or, from a template, "
    "template_render_failed (it raised while rendering with this data) or render_limit (its output or render time "
    "past MAX_MESSAGE_BYTES or TEMPLATE_RENDER_SECONDS)."
)
# Requests a client can send as they are, once user-42 is stored (PUT /recipients/user-42) and the
# template welcome exists (PUT /templates/welcome); tests/test_api_docs.py sends each.
NOTIFICATION_EXAMPLES = [
    request_example(
        "An email",
        {
            "user_id": "user-42",
            "channel": "email",
            "to": "ann@example.com",
            "subject": "Your order has shipped",
            "message": "Order 1042 is on its way.",
        },
        "The address given in to; the text as it is.",
    ),
    request_example(
        "From a template, to the stored recipient",
        {"user_id": "user-42", "template": "welcome", "data": {"name": "Ann"}},
        "No to: the recipient's stored email. Rendered in the recipient's locale.",
    ),
    request_example(
        "A route: SMS, then email",
        {"user_id": "user-42", "channels": ["sms", "email"], "message": "Your parcel arrives today."},
        "channels instead of channel: tried in order until one delivers, each at the recipient's stored address.",
    ),
]


def _accept(request: Request, payload: Any, header_key: str | None) -> services.AcceptResult:
    if header_key and (len(header_key) > MAX_KEY_LENGTH or not header_key.isprintable()):
        raise ValidationFailed(
            f"an Idempotency-Key is 1 to {MAX_KEY_LENGTH} printable characters", extra={"field": "Idempotency-Key"}
        )
    serializer = NotificationCreateSerializer(data=payload)
    serializer.is_valid(raise_exception=True)
    body_key = serializer.validated_data.get("idempotency_key")
    fingerprint_source = {k: v for k, v in payload.items() if k != "idempotency_key"}
    return services.notification_accept_grouped(
        client=_client(request),
        request=serializer.to_request(),
        idempotency_key=header_key or body_key,
        fingerprint=services.request_fingerprint(fingerprint_source),
    )


def _client(request: Request) -> ApiClient:
    """The authenticated API client (IsApiClient has already refused anyone else)."""
    return cast(ApiClient, request.user)


def _path_user_id(user_id: str) -> str:
    if len(user_id) > MAX_KEY_LENGTH or "\x00" in user_id:
        raise ValidationFailed(f"a user_id is 1 to {MAX_KEY_LENGTH} characters without NUL", extra={"field": "user_id"})
    return user_id


def _require_object(data: Any) -> dict[str, Any]:
    if not isinstance(data, dict):
        raise serializers.ValidationError({"non_field_errors": ["the request body must be a JSON object"]})
    return data


class NotificationCollectionView(APIView):
    # Read by drf-spectacular too, so the list is documented as the page it answers.
    pagination_class = NewestFirstPagination

    @api_operation(
        "notifications_create",
        {
            202: AcceptedSerializer,
            400: BAD_CONTENT,
            409: "Never for a request racing another with the same Idempotency-Key (it waits and replays the first's "
            "answer): only when the key is stored without its answer (state processing) or was purged at that "
            "moment; retry shortly.",
            413: "The body is over the upload limit (DATA_UPLOAD_MAX_MEMORY_SIZE).",
            422: "The same Idempotency-Key came with a different body.",
        },
        request=NotificationCreateSerializer,
        parameters=[IDEMPOTENCY_HEADER, REPLAYED_HEADER],
        summary="Send a notification",
        description="Accepts one notification to one recipient and answers at once (202; its status queued, or "
        "suppressed when preferences or the suppression list forbid it, or digested into a digest): delivery "
        "happens in the background, retried on a provider's transient errors. Give the text (`message`) or a `template` with its `data`; one `channel`, or `channels` for a "
        "fallback route (not both); `to`, or nothing to use the recipient's stored address. Send an "
        "Idempotency-Key to make a retry safe: the same key and body answer the first answer again. Follow it "
        "with GET /notifications/{id} or your status webhook.",
        examples=NOTIFICATION_EXAMPLES,
    )
    def post(self, request: Request) -> Response:
        payload = _require_object(request.data)
        result = _accept(request, payload, request.headers.get("Idempotency-Key"))
        headers = {"Idempotent-Replayed": "true"} if result.replayed else {}
        return Response(result.body, status=result.status_code, headers=headers)

    @api_operation(
        "notifications_list",
        {
            200: NotificationSerializer(many=True),
            400: "A filter or page_size is invalid or empty; `field` names it.",
            404: "The cursor names no page (cursors come only from a page's next and previous links).",
        },
        parameters=[NotificationFilterSerializer],
        summary="List notifications",
        description="This client's notifications, newest first, a page at a time (page_size, then the next "
        "link's cursor), filtered by status, channel, user_id, broadcast and creation time.",
    )
    def get(self, request: Request) -> Response:
        filters = NotificationFilterSerializer(data=request.query_params)
        filters.is_valid(raise_exception=True)
        queryset = selectors.notification_list(client=_client(request), filters=filters.validated_data)
        paginator = self.pagination_class()
        page = paginator.paginate_queryset(queryset, request, view=self)
        return paginator.get_paginated_response(NotificationSerializer(page, many=True).data)


class NotificationBatchView(APIView):
    @api_operation(
        "notifications_create_batch",
        {
            202: OpenApiResponse(
                BatchResultSerializer,
                description="One result per item, in order: {status, body | error}; an item that fails, even "
                "with a 500, fails only its own slot.",
            ),
            400: f"The body is no object with a list of 1 to {MAX_BATCH} notifications.",
            413: "The body is over the upload limit (DATA_UPLOAD_MAX_MEMORY_SIZE).",
        },
        request=BatchCreateSerializer,
        summary="Send up to 100 notifications at once",
        description=f"1 to {MAX_BATCH} notifications, each as POST /notifications takes it, accepted in one go. "
        "The answer is a 202 with one result per item in order: a bad item fails in its own slot (its status and "
        "error) and the others are accepted. Each item may carry its own idempotency_key.",
        examples=[
            request_example(
                "Two notifications",
                {
                    "notifications": [
                        {"user_id": "user-42", "to": "ann@example.com", "message": "Your invoice is ready."},
                        {"user_id": "user-43", "channel": "sms", "to": "+14155550123", "message": "Your invoice is ready."},
                    ]
                },
            )
        ],
    )
    def post(self, request: Request) -> Response:
        envelope = BatchCreateSerializer(data=_require_object(request.data))
        envelope.is_valid(raise_exception=True)
        items = envelope.validated_data["notifications"]
        slots: list[dict[str, Any] | None] = [None] * len(items)
        parsed: list[tuple[int, services.BatchItem]] = []
        for index, item in enumerate(items):
            try:
                parsed.append((index, _batch_item(_require_object(item))))
            except (NotificationError, APIException) as exc:
                slots[index] = self._error_slot(request, exc)
        try:
            results: list[Any] = services.notification_accept_batch(client=_client(request), items=[i for _, i in parsed])
        except Exception as exc:
            if database_unavailable(exc):
                raise  # the whole batch answers 503 with Retry-After, as a single accept does
            # The batch's write failed as a whole: accept its items one by one, so that only a bad
            # item fails, in its own slot. Keys already committed replay, so nothing goes twice.
            logger.exception("a batch of %d failed as a whole; accepting its items one by one", len(parsed))
            results = [self._accept_alone(request, index, item) for index, item in parsed]
        for (index, _), result in zip(parsed, results, strict=True):
            slots[index] = result if isinstance(result, dict) else self._slot(request, result)
        return Response({"results": slots}, status=status.HTTP_202_ACCEPTED)

    def _slot(self, request: Request, result: services.AcceptResult | NotificationError) -> dict[str, Any]:
        if isinstance(result, NotificationError):
            return self._error_slot(request, result)
        return {"status": result.status_code, "body": result.body}

    def _error_slot(self, request: Request, exc: Exception) -> dict[str, Any]:
        response = api_exception_handler(exc, {"request": request, "view": self})
        assert response is not None
        return {"status": response.status_code, **response.data}

    def _accept_alone(self, request: Request, index: int, item: services.BatchItem) -> dict[str, Any]:
        try:
            result = services.notification_accept(
                client=_client(request), request=item.request, idempotency_key=item.idempotency_key, fingerprint=item.fingerprint
            )
        except NotificationError as exc:
            return self._error_slot(request, exc)
        except Exception as exc:
            logger.exception("batch item %d failed unexpectedly; the other items went on", index)
            http_status, body, _ = unhandled_error(exc)
            return {"status": http_status, **body}
        return self._slot(request, result)


def _batch_item(payload: dict[str, Any]) -> services.BatchItem:
    """One batch item, parsed and shape-checked as a single POST is (its own key or a new one)."""
    serializer = NotificationCreateSerializer(data=payload)
    serializer.is_valid(raise_exception=True)
    fingerprint_source = {k: v for k, v in payload.items() if k != "idempotency_key"}
    return services.BatchItem(
        request=serializer.to_request(),
        idempotency_key=serializer.validated_data.get("idempotency_key") or str(uuid.uuid4()),
        fingerprint=services.request_fingerprint(fingerprint_source),
    )


class NotificationDetailView(APIView):
    @api_operation(
        "notifications_retrieve",
        {200: NotificationDetailSerializer, 404: NOT_FOUND},
        summary="Get a notification",
        description="Its status, where it was sent, its route (for a fallback), and every delivery attempt with "
        "its outcome and error.",
    )
    def get(self, request: Request, notification_id: str) -> Response:
        notification = selectors.notification_get(client=_client(request), notification_id=notification_id)
        return Response(NotificationDetailSerializer(notification).data)


class NotificationCancelView(APIView):
    @api_operation(
        "notifications_cancel",
        {200: NotificationSerializer, 404: NOT_FOUND, 409: "It is sending or finished (delivered, failed, dead or cancelled)."},
        summary="Cancel a notification",
        description="Stops a notification that has not been sent yet (accepted, queued, retrying, or waiting in a "
        "digest); one being sent or finished cannot be cancelled (409). No body.",
    )
    def post(self, request: Request, notification_id: str) -> Response:
        notification = services.notification_cancel(client=_client(request), notification_id=notification_id)
        return Response(NotificationSerializer(notification).data)
