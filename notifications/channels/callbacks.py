"""What every provider callback view shares (channels/<name>/callbacks.py): no API token, no
client throttle, the answer's shape, and the refusals.

No API token: each request is authenticated by the provider's own signature, checked by the
channel's feedback module; one that does not verify is a 403 in our error shape, and one that
cannot be checked now (Redis down) a 503 with Retry-After."""

from __future__ import annotations

from typing import Any

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter
from rest_framework import serializers, status
from rest_framework.permissions import AllowAny
from rest_framework.response import Response
from rest_framework.views import APIView

from .. import services
from ..api.exceptions import error_body

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


def callback_answer(result: services.FeedbackResult) -> Response:
    return Response(
        {
            "outcome": result.outcome,
            "notification_id": result.notification_id,
            "provider_status": result.provider_status,
            "suppressed": result.suppressed,
        }
    )


def callback_refused(exc: services.CallbackRejected | services.CallbackUnavailable) -> Response:
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
