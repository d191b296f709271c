"""Providers reporting back: Twilio's SMS status callbacks and Mailgun's email event webhooks.

No API token: each request is authenticated by the provider's own signature, checked by the
service; one that does not verify is a 403 in our error shape."""

from __future__ import annotations

from typing import Any, cast

from django.http import QueryDict
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiExample, OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework import serializers, status
from rest_framework.parsers import FormParser
from rest_framework.permissions import AllowAny
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from .. import services
from ..api.exceptions import error_body
from ..api.schema import error

# Seconds a provider may wait before retrying while Redis is unreachable (Mailgun retries for hours).
UNAVAILABLE_RETRY_AFTER_SECONDS = 60
RETRY_AFTER = OpenApiParameter(
    "Retry-After",
    OpenApiTypes.INT,
    OpenApiParameter.HEADER,
    required=True,
    response=[503],
    description="Seconds to wait before trying again.",
)


class FeedbackResultSerializer(serializers.Serializer):  # type: ignore[type-arg]
    outcome = serializers.ChoiceField(
        choices=["recorded", "unchanged", "ignored", "unknown_message"],
        help_text="recorded; unchanged (a later status was already recorded); ignored (an event not tracked, "
        "a soft bounce, a Mailgun event whose recipient is not the notification's address); unknown_message "
        "(no notification has this message id, or it is about another send of it).",
    )
    notification_id = serializers.CharField(allow_blank=True)
    provider_status = serializers.CharField(allow_blank=True)
    suppressed = serializers.CharField(allow_blank=True, help_text="The suppression reason, when the address was suppressed.")


def _answer(result: services.FeedbackResult) -> Response:
    return Response(
        {
            "outcome": result.outcome,
            "notification_id": result.notification_id,
            "provider_status": result.provider_status,
            "suppressed": result.suppressed,
        }
    )


def _refused(exc: services.CallbackRejected | services.CallbackUnavailable) -> Response:
    if isinstance(exc, services.CallbackUnavailable):
        return Response(
            error_body(exc.code, exc.message),
            status=status.HTTP_503_SERVICE_UNAVAILABLE,
            headers={"Retry-After": str(UNAVAILABLE_RETRY_AFTER_SECONDS)},
        )
    return Response(error_body(exc.code, exc.message), status=status.HTTP_403_FORBIDDEN)


class ProviderCallbackView(APIView):
    authentication_classes: list[Any] = []
    permission_classes = [AllowAny]
    # Not the API's per-client throttle: a provider's burst of callbacks is not a client's requests.
    throttle_classes: list[Any] = []


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
            return _refused(exc)
        return _answer(result)


class MailgunEventView(ProviderCallbackView):
    @extend_schema(
        operation_id="providers_mailgun_events",
        summary="Mailgun: an email's delivery event",
        description="Mailgun's webhook: records delivered on the notification, and suppresses the address on a "
        "permanent failure (hard bounce) or a spam complaint. Verified by its signature (HMAC-SHA256 with "
        "MAILGUN_WEBHOOK_SIGNING_KEY over timestamp and token, each token once, within 15 minutes); for Mailgun, not "
        "for API clients.",
        tags=["providers"],
        auth=[],
        parameters=[RETRY_AFTER],
        request={
            "application/json": {
                "type": "object",
                "properties": {
                    "signature": {
                        "type": "object",
                        "properties": {
                            "timestamp": {"type": "string"},
                            "token": {"type": "string"},
                            "signature": {"type": "string"},
                        },
                        "required": ["timestamp", "token", "signature"],
                    },
                    "event-data": {
                        "type": "object",
                        "description": "Mailgun's event: event, severity, recipient, message.headers.",
                    },
                },
                "required": ["signature", "event-data"],
            }
        },
        examples=[
            OpenApiExample(
                "hard bounce",
                request_only=True,
                value={
                    "signature": {
                        "timestamp": "1770920772",
                        "token": "e0b5477167110d68991efc6b9f89f0a11066af27834600e123",
                        "signature": "…",
                    },
                    "event-data": {
                        "event": "failed",
                        "severity": "permanent",
                        "recipient": "ann@example.com",
                        "message": {"headers": {"message-id": "0b9c…@example.com"}},
                    },
                },
            )
        ],
        responses={
            200: OpenApiResponse(FeedbackResultSerializer, description="Verified; what it changed."),
            400: error("Signed, but event-data or its message-id is missing; `field` names it."),
            403: error("The signature does not verify, is older than 15 minutes, or its token was used before."),
            415: error("Not a JSON body."),
            503: error("Redis (the token check) or PostgreSQL cannot be reached; Mailgun retries later."),
        },
    )
    def post(self, request: Request) -> Response:
        try:
            result = services.mailgun_event_record(payload=request.data)
        except (services.CallbackRejected, services.CallbackUnavailable) as exc:
            return _refused(exc)
        return _answer(result)
