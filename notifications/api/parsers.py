"""The API's JSON parser: DRF's, with a too-deeply nested body refused as a parse error."""

from __future__ import annotations

from typing import Any

from rest_framework.exceptions import ParseError
from rest_framework.parsers import JSONParser


class BoundedJSONParser(JSONParser):
    def parse(self, stream: Any, media_type: str | None = None, parser_context: Any = None) -> Any:
        try:
            return super().parse(stream, media_type, parser_context)
        except RecursionError:
            # json.loads recurses per nesting level; DRF only catches ValueError, so this was a 500.
            raise ParseError("JSON parse error - the body is nested too deeply") from None
