"""What the OpenAPI schema says about every API operation: its own answers plus the ones all share."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from drf_spectacular.extensions import OpenApiSerializerExtension
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiExample, OpenApiParameter, OpenApiResponse, extend_schema

from .serializers import ErrorSerializer, RefusesUnknownFields

Answer = Any  # a serializer (class or instance), an OpenApiResponse, None for no body, or a str: an error


def error(description: str) -> OpenApiResponse:
    return OpenApiResponse(ErrorSerializer, description=description)


# Every operation authenticates its client (a database read), is throttled per client in Redis, and
# so can answer these whatever it does.
SHARED_ANSWERS: dict[int, OpenApiResponse] = {
    401: error("No bearer token, or an unknown or revoked one (WWW-Authenticate: Bearer)."),
    429: error("Over the client's request rate (API_THROTTLE_RATE); Retry-After says in how many seconds to try again."),
    503: error("PostgreSQL cannot be reached (code unavailable); try again after Retry-After seconds."),
}
SHARED_HEADERS = [
    OpenApiParameter(
        "Retry-After",
        OpenApiTypes.INT,
        OpenApiParameter.HEADER,
        required=True,
        response=[429, 503],
        description="Seconds to wait before trying again.",
    ),
]


def api_operation(
    operation_id: str,
    answers: dict[int, Answer],
    *,
    summary: str,
    description: str,
    request: Any = None,
    parameters: Sequence[Any] = (),
    examples: Sequence[OpenApiExample] = (),
) -> Callable[[Any], Any]:
    """``extend_schema`` for an operation of the v1 API: ``answers`` (a str is an error answer with
    that description, in the one error shape) plus 401, 429 and 503 (an operation may say more of
    one of these: its own description is kept). It is filed under the tag its ``operation_id``
    starts with (``topics_subscribe``: topics), one of SPECTACULAR_SETTINGS["TAGS"]; ``examples``
    are real requests, each posted by tests/test_api_docs.py and answered with the operation's 2xx."""
    responses = {code: error(answer) if isinstance(answer, str) else answer for code, answer in answers.items()}
    return extend_schema(
        operation_id=operation_id,
        summary=summary,
        description=description,
        tags=[operation_id.partition("_")[0]],
        request=request,
        parameters=[*parameters, *SHARED_HEADERS],
        responses={**responses, **{code: answer for code, answer in SHARED_ANSWERS.items() if code not in responses}},
        examples=list(examples),
    )


def request_example(name: str, value: dict[str, Any], description: str = "") -> OpenApiExample:
    """A request body a client can send as it is (once what it names exists)."""
    return OpenApiExample(name, value=value, description=description, request_only=True)


class ClosedObjectSchema(OpenApiSerializerExtension):  # type: ignore[no-untyped-call]
    """A request serializer that refuses unknown fields is a closed object in the schema too."""

    target_class = RefusesUnknownFields
    match_subclasses = True

    def map_serializer(self, auto_schema: Any, direction: str) -> dict[str, Any]:
        schema = auto_schema._map_serializer(self.target, direction, bypass_extensions=True)
        return {**schema, "additionalProperties": False} if direction == "request" else schema
