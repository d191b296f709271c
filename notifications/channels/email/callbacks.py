"""Mailgun's event webhooks for the email we sent: the view and its route;
channels/email/feedback.py verifies and reads them."""

from __future__ import annotations

from django.urls import path
from drf_spectacular.utils import OpenApiExample, OpenApiResponse, extend_schema
from rest_framework.request import Request
from rest_framework.response import Response

from ... import services
from ...api.schema import error
from ..callbacks import RETRY_AFTER, FeedbackResultSerializer, ProviderCallbackView, callback_answer, callback_refused


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
            return callback_refused(exc)
        return callback_answer(result)


urlpatterns = [
    path("providers/mailgun/events", MailgunEventView.as_view(), name="provider-mailgun-events"),
]
