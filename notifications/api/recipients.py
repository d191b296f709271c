"""The recipients endpoint: a recipient's addresses, locale, time zone and quiet hours, by user_id."""

from __future__ import annotations

from drf_spectacular.utils import OpenApiResponse
from rest_framework import status
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from .. import selectors, services
from .exceptions import error_body
from .schema import api_operation, request_example
from .serializers import (
    RecipientSerializer,
)
from .views import BAD_USER_ID, USER_ID, _client, _path_user_id, _require_object


class RecipientView(APIView):
    @api_operation(
        "recipients_retrieve",
        {
            200: RecipientSerializer,
            400: BAD_USER_ID,
            404: "This client has stored no recipient with this user_id.",
        },
        parameters=[USER_ID],
        summary="Get a recipient",
        description="The addresses and settings stored for this user_id.",
    )
    def get(self, request: Request, user_id: str) -> Response:
        recipient = selectors.recipient_get(client=_client(request), user_id=_path_user_id(user_id))
        if recipient is None:
            return Response(error_body("not_found", f"no recipient {user_id!r}"), status=status.HTTP_404_NOT_FOUND)
        return Response(RecipientSerializer(recipient).data)

    @api_operation(
        "recipients_upsert",
        {
            200: OpenApiResponse(RecipientSerializer, description="Replaced."),
            201: OpenApiResponse(RecipientSerializer, description="Created."),
            400: "A field or the user_id is invalid; `field` names it.",
            413: "The body is over the upload limit (DATA_UPLOAD_MAX_MEMORY_SIZE).",
        },
        request=RecipientSerializer,
        parameters=[USER_ID],
        summary="Create or replace a recipient",
        description="Stores the recipient's addresses (email, phone in E.164, push tokens, webhook URL), locale, "
        "timezone and quiet hours under your user_id; a field left out is cleared. Notifications without `to` "
        "are sent to these addresses.",
        examples=[
            request_example(
                "Email and phone, with quiet hours",
                {
                    "email": "ann@example.com",
                    "phone": "+14155550123",
                    "locale": "en",
                    "timezone": "Europe/Paris",
                    "quiet_hours": {"start": "22:00", "end": "08:00"},
                },
            )
        ],
    )
    def put(self, request: Request, user_id: str) -> Response:
        serializer = RecipientSerializer(data=_require_object(request.data))
        serializer.is_valid(raise_exception=True)
        recipient, created = services.recipient_upsert(
            client=_client(request), user_id=_path_user_id(user_id), data=serializer.validated_data
        )
        return Response(RecipientSerializer(recipient).data, status=status.HTTP_201_CREATED if created else status.HTTP_200_OK)

    @api_operation(
        "recipients_delete",
        {
            204: None,
            400: BAD_USER_ID,
            404: "This client has stored no recipient with this user_id.",
        },
        parameters=[USER_ID],
        summary="Delete a recipient",
        description="Forgets the recipient: its addresses, preferences and topic subscriptions. Its notifications stay.",
    )
    def delete(self, request: Request, user_id: str) -> Response:
        services.recipient_delete(client=_client(request), user_id=_path_user_id(user_id))
        return Response(status=status.HTTP_204_NO_CONTENT)
