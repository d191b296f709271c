"""Cursor pagination of lists, strict about its two parameters and documented as it behaves."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from django.core.exceptions import ValidationError as DjangoValidationError
from django.db.models import QuerySet
from rest_framework.exceptions import NotFound, ValidationError
from rest_framework.pagination import Cursor, CursorPagination
from rest_framework.request import Request
from rest_framework.views import APIView


class NewestFirstPagination(CursorPagination):
    ordering = ("-created_at", "-id")
    page_size = 50
    page_size_query_param = "page_size"
    max_page_size = 200
    invalid_cursor_message = "the cursor names no page; take cursors only from a list's next and previous links"

    def get_page_size(self, request: Request) -> int:
        # DRF falls back to the default for a page_size it cannot read and cuts one over the maximum,
        # so a typo changed the page silently; the schema says 1 to 200 and so does the answer.
        raw = request.query_params.get(self.page_size_query_param)
        if raw is None:
            return self.page_size
        try:
            size = int(raw) if raw.isascii() and raw.isdigit() else 0
        except ValueError:  # more digits than int() will read
            size = 0
        if not 1 <= size <= self.max_page_size:
            raise ValidationError({self.page_size_query_param: [f"a whole number from 1 to {self.max_page_size}"]})
        return size

    def decode_cursor(self, request: Request) -> Cursor | None:
        if request.query_params.get(self.cursor_query_param) == "":
            # Read as "the first page" by DRF: a client that lost its cursor would start over unawares.
            raise ValidationError({self.cursor_query_param: ["may not be empty; leave it out for the first page"]})
        return super().decode_cursor(request)

    def paginate_queryset(
        self, queryset: QuerySet[Any, Any] | Sequence[Any], request: Request, view: APIView | None = None
    ) -> list[Any] | None:
        try:
            return super().paginate_queryset(queryset, request, view)
        except DjangoValidationError:
            # The position of a hand-made cursor that is no timestamp failed in the created_at lookup
            # and was a 500; it names no page, like any other cursor we did not issue.
            raise NotFound(self.invalid_cursor_message) from None

    def get_paginated_response_schema(self, schema: dict[str, Any]) -> dict[str, Any]:
        page = super().get_paginated_response_schema(schema)
        for link, which in (("next", "older"), ("previous", "newer")):
            page["properties"][link].pop("example", None)
            page["properties"][link]["description"] = f"The {which} page, or null when there is none."
        page["required"] = ["next", "previous", "results"]
        return page

    def get_schema_operation_parameters(self, view: APIView) -> list[dict[str, Any]]:
        return [
            {
                "name": self.cursor_query_param,
                "required": False,
                "in": "query",
                "description": "Opaque; from the next or previous link of the page before. Absent: the newest page.",
                "schema": {"type": "string", "minLength": 1},
            },
            {
                "name": self.page_size_query_param,
                "required": False,
                "in": "query",
                "description": f"Notifications per page, 1 to {self.max_page_size}.",
                "schema": {"type": "integer", "minimum": 1, "maximum": self.max_page_size, "default": self.page_size},
            },
        ]
