"""One-click unsubscribe (RFC 8058) at ``/u/{token}``: no login, the signed token is the authority.

A mail client POSTs ``List-Unsubscribe=One-Click``; a person following the link gets a page whose
button POSTs the same. Both answer an HTML page, and a token that is not valid is a 400 page."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiExample, OpenApiResponse, extend_schema
from rest_framework.negotiation import BaseContentNegotiation
from rest_framework.parsers import BaseParser, FormParser, MultiPartParser
from rest_framework.permissions import AllowAny
from rest_framework.renderers import BaseRenderer, TemplateHTMLRenderer
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from ... import services
from ...errors import ValidationFailed

PAGE = "notifications/unsubscribe.html"
ONE_CLICK = {"List-Unsubscribe": "One-Click"}
BAD_TOKEN = OpenApiResponse(OpenApiTypes.STR, description="HTML page: the link is not valid (tampered with or not ours).")


def _page(state: str, *, token: str = "", target: services.UnsubscribeTarget | None = None, status: int = 200) -> Response:
    context: dict[str, Any] = {"state": state, "token": token}
    if target is not None:
        context.update(category=target.category, channel=target.channel)
    return Response(context, status=status, template_name=PAGE)


class PageOnly(BaseContentNegotiation):
    """Always the HTML page: a mail provider's one-click POST may send any Accept, and a 406 would
    leave the recipient subscribed."""

    def select_parser(self, request: Request, parsers: Iterable[BaseParser]) -> BaseParser | None:
        return next((parser for parser in parsers if request.content_type.startswith(parser.media_type)), None)

    def select_renderer(
        self, request: Request, renderers: Iterable[BaseRenderer], format_suffix: str | None = None
    ) -> tuple[BaseRenderer, str]:
        renderer = next(iter(renderers))
        return renderer, renderer.media_type


class UnsubscribeView(APIView):
    # The page and the one-click POST; DRF's OPTIONS metadata has no page to render.
    http_method_names = ["get", "post", "head"]
    content_negotiation_class = PageOnly
    authentication_classes: list[Any] = []
    permission_classes = [AllowAny]
    throttle_classes: list[Any] = []
    renderer_classes = [TemplateHTMLRenderer]
    # RFC 8058: the POST is form-encoded (some senders' clients use multipart).
    parser_classes = [FormParser, MultiPartParser]

    @extend_schema(
        operation_id="unsubscribe_page",
        summary="Unsubscribe page",
        description="The page an email's unsubscribe link opens (the link is the List-Unsubscribe header's, signed "
        "for one recipient, category and channel): a button that unsubscribes. HTML, for the recipient; no token.",
        tags=["recipients"],
        auth=[],
        responses={
            (200, "text/html"): OpenApiResponse(OpenApiTypes.STR, description="HTML page with a button that unsubscribes."),
            (400, "text/html"): BAD_TOKEN,
        },
    )
    def get(self, request: Request, token: str) -> Response:
        try:
            target = services.unsubscribe_target(token)
        except ValidationFailed:
            return _page("invalid", status=400)
        return _page("confirm", token=token, target=target)

    @extend_schema(
        operation_id="unsubscribe_one_click",
        summary="One-click unsubscribe",
        description="RFC 8058's one-click unsubscribe, POSTed by the recipient's mail client or the page's button: "
        "opts the recipient out of the link's category on its channel (shown in their preferences' "
        "unsubscribed). HTML, for the recipient; no token.",
        tags=["recipients"],
        auth=[],
        request={
            "application/x-www-form-urlencoded": {
                "type": "object",
                "properties": {"List-Unsubscribe": {"type": "string", "enum": ["One-Click"]}},
                "required": ["List-Unsubscribe"],
            }
        },
        examples=[
            OpenApiExample("one click", value=ONE_CLICK, request_only=True, media_type="application/x-www-form-urlencoded")
        ],
        responses={
            (200, "text/html"): OpenApiResponse(
                OpenApiTypes.STR,
                description="Opted out of the token's category on its channel (idempotent); an HTML page says so.",
            ),
            (400, "text/html"): OpenApiResponse(
                OpenApiTypes.STR, description="HTML page: the link is not valid, or the body is not List-Unsubscribe=One-Click."
            ),
        },
    )
    def post(self, request: Request, token: str) -> Response:
        if not isinstance(request.data, dict) or request.data.get("List-Unsubscribe") != "One-Click":
            return _page("invalid_body", status=400)
        try:
            target = services.unsubscribe_one_click(token=token)
        except ValidationFailed:
            return _page("invalid", status=400)
        return _page("done", target=target)
