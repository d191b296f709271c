"""Twilio's status callbacks for the SMS we sent: the view (the StatusCallback URL each send gives,
under PUBLIC_BASE_URL) and its route; channels/sms/feedback.py verifies and reads them."""

from __future__ import annotations

from typing import cast

from django.http import QueryDict
from django.urls import path
from drf_spectacular.utils import OpenApiExample, OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework.parsers import FormParser
from rest_framework.request import Request
from rest_framework.response import Response

from ... import services
from ...api.schema import error
from ..callbacks import RETRY_AFTER, FeedbackResultSerializer, ProviderCallbackView, callback_answer, callback_refused


class TwilioStatusCallbackView(ProviderCallbackView):
    parser_classes = [FormParser]

    @extend_schema(
        operation_id="providers_twilio_status",
        summary="Twilio: an SMS's delivery status",
        description="Twilio's status callback for an SMS we sent (its StatusCallback URL, under PUBLIC_BASE_URL): "
        "records delivered or failed on the notification, and suppresses the number on error 21610 (STOP). "
        "Verified by X-Twilio-Signature; for Twilio, not for API clients.",
        tags=["providers"],
        auth=[],
        parameters=[
            OpenApiParameter(
                "X-Twilio-Signature",
                str,
                OpenApiParameter.HEADER,
                required=True,
                description="Base64 HMAC-SHA1 of the full URL and the sorted POST parameters, keyed with TWILIO_AUTH_TOKEN.",
            ),
            OpenApiParameter("notification", str, OpenApiParameter.QUERY, description="Set by us in the StatusCallback URL."),
            RETRY_AFTER,
        ],
        request={
            "application/x-www-form-urlencoded": {
                "type": "object",
                "properties": {
                    "MessageSid": {"type": "string"},
                    "MessageStatus": {"type": "string", "description": "queued, sent, delivered, undelivered, failed..."},
                    "ErrorCode": {"type": "string", "description": "21610: the recipient replied STOP (suppressed)."},
                },
                "required": ["MessageSid", "MessageStatus"],
            }
        },
        examples=[
            OpenApiExample(
                "delivered",
                request_only=True,
                media_type="application/x-www-form-urlencoded",
                value={
                    "AccountSid": "AC0123456789abcdef0123456789abcdef",
                    "MessageSid": "SM0123456789abcdef0123456789abcdef",
                    "MessageStatus": "delivered",
                },
                description="Sent with its X-Twilio-Signature over the URL and these parameters.",
            )
        ],
        responses={
            200: OpenApiResponse(FeedbackResultSerializer, description="Verified; what it changed."),
            400: error("Signed, but names no MessageSid."),
            403: error("The X-Twilio-Signature does not verify (or TWILIO_AUTH_TOKEN is not set)."),
            415: error("Not a form-encoded body."),
            503: error("PostgreSQL cannot be reached; Twilio may retry."),
        },
    )
    def post(self, request: Request) -> Response:
        form = cast(QueryDict, request.data)  # FormParser's
        params = {name: [str(value) for value in form.getlist(name)] for name in form}
        try:
            result = services.twilio_status_record(
                request_url=request.build_absolute_uri(),
                path=request.get_full_path(),
                params=params,
                signature=request.headers.get("X-Twilio-Signature", ""),
            )
        except services.CallbackRejected as exc:
            return callback_refused(exc)
        return callback_answer(result)


urlpatterns = [
    path("providers/twilio/status", TwilioStatusCallbackView.as_view(), name="provider-twilio-status"),
]
