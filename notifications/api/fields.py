"""The API's own field kinds and input checks, shared by its serializers: strict strings (no
numbers turned into text), a closed object shape, and what metadata may hold."""

from __future__ import annotations

import json
import math
import re
import threading
from typing import Any

from django.utils.functional import cached_property
from rest_framework import serializers
from rest_framework.fields import SkipField
from rest_framework.validators import ProhibitSurrogateCharactersValidator

from ..channels.addresses import http_url
from ..locales import LOCALE_PATTERN, MAX_LOCALE_LENGTH

# Metadata is stored with the notification and echoed by every read; it is context, not a payload.
MAX_METADATA_BYTES = 16 * 1024
MAX_METADATA_DEPTH = 32  # the metadata object itself is the first level
MAX_BATCH = 100


def metadata_problem(metadata: dict[str, Any], name: str = "metadata") -> str | None:
    """Why ``metadata`` (or another free JSON object, ``name`` in the message: a template's ``data``)
    cannot be accepted, or None: what jsonb refuses, or over our limits.

    PostgreSQL's jsonb refuses \\u0000, a lone UTF-16 surrogate and Infinity/NaN (what a number too
    large for a float, like 1e999, parses to); each was a 500 from the INSERT. The walk is iterative
    and bounded in depth and in steps, so a hostile body costs little and never recurses.
    """
    if not metadata:
        return None  # most requests: nothing to walk, and "{}" is two bytes
    pending: list[tuple[Any, int]] = [(metadata, 1)]
    steps = 0
    while pending:
        steps += 1
        if steps > MAX_METADATA_BYTES:
            # Every key and value takes at least one byte of JSON, so the size check would fail anyway.
            return f"{name} is over {MAX_METADATA_BYTES} bytes as JSON; the limit is {MAX_METADATA_BYTES}"
        value, depth = pending.pop()
        if isinstance(value, str):
            if "\x00" in value:
                return f"{name} may not contain NUL (\\u0000) characters"
            if not value.isascii() and not _is_utf8_encodable(value):
                return f"{name} may not contain a lone UTF-16 surrogate (\\ud800-\\udfff) in a key or value"
        elif isinstance(value, float):
            if not math.isfinite(value):
                return f"{name} may hold only finite numbers, not NaN or Infinity (nor one too large, like 1e999)"
        elif isinstance(value, (dict, list)):
            if depth > MAX_METADATA_DEPTH:
                return f"{name} may nest objects and arrays at most {MAX_METADATA_DEPTH} levels deep"
            if isinstance(value, dict):
                pending.extend((key, depth) for key in value)
                pending.extend((item, depth + 1) for item in value.values())
            else:
                pending.extend((item, depth + 1) for item in value)
    size = len(json.dumps(metadata, ensure_ascii=False, allow_nan=False, separators=(",", ":")).encode())
    if size > MAX_METADATA_BYTES:
        return f"{name} is {size} bytes as JSON; the limit is {MAX_METADATA_BYTES}"
    return None


_SURROGATE = re.compile("[\ud800-\udfff]")


class _SurrogateCharacters(ProhibitSurrogateCharactersValidator):
    """DRF's check, its message and code, without its loop over every character in Python (a
    10 KB message was ten thousand steps): an ASCII string has none, else one regex search."""

    def __call__(self, value: Any) -> None:
        text = str(value)
        if text.isascii():
            return
        found = _SURROGATE.search(text)
        if found is not None:
            raise serializers.ValidationError(self.message.format(code_point=ord(found.group())), code=self.code)


def _with_our_surrogate_check(field: serializers.Field) -> None:  # type: ignore[type-arg]
    field.validators = [
        _SurrogateCharacters() if type(validator) is ProhibitSurrogateCharactersValidator else validator
        for validator in field.validators
    ]


class StrictStringMixin:
    """JSON strings only: DRF reads 0 or 1.5 as "0" and "1.5", so a client's type bug passed unseen
    (and the schema, which says string, was not what the API did)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        _with_our_surrogate_check(self)  # type: ignore[arg-type]

    def to_internal_value(self, data: Any) -> Any:
        if not isinstance(data, str):
            raise serializers.ValidationError("must be a string", code="invalid")
        # The schema's maxLength is about the string sent: DRF measures it after trimming, so a
        # name padded past its bound with whitespace was accepted against the schema.
        max_length = getattr(self, "max_length", None)
        if max_length is not None and len(data) > max_length:
            message = self.error_messages["max_length"].format(max_length=max_length)  # type: ignore[attr-defined]
            raise serializers.ValidationError(message, code="max_length")
        return super().to_internal_value(data)  # type: ignore[misc]


class StrictCharField(StrictStringMixin, serializers.CharField):
    pass


class StrictEmailField(StrictStringMixin, serializers.EmailField):
    pass


class StrictURLField(StrictStringMixin, serializers.URLField):
    pass


class StrictRegexField(StrictStringMixin, serializers.RegexField):
    pass


class StrictBooleanField(serializers.BooleanField):
    """JSON true or false only: DRF reads 0, "yes" and "off" as booleans too."""

    def to_internal_value(self, data: Any) -> bool:
        if not isinstance(data, bool):
            raise serializers.ValidationError("must be true or false", code="invalid")
        return data


# A locale as the API takes it (the schema's pattern is the server's rule, notifications/locales.py).
def locale_field(**kwargs: Any) -> StrictRegexField:
    return StrictRegexField(LOCALE_PATTERN, max_length=MAX_LOCALE_LENGTH, **kwargs)


_bound_fields = threading.local()


class ReusedFields:
    """A serializer whose bound fields are made once per thread, not on every instantiation.

    DRF deep-copies every declared field each time a serializer is made (Serializer.get_fields),
    so it can bind the copies to it: for the accept's twenty fields a fifth of a request's CPU.
    The fields hold nothing of a validation but their ``parent`` (how a field finds its
    serializer's context), so one thread's serializers of a class can share one set, pointed at
    the serializer in use; a thread validates one request at a time. Only for serializers whose
    fields are plain declarations (none made per instance from its data or context). The last
    serializer of each thread stays referenced (by its fields' ``parent``) until the next one: its
    request body, at most DATA_UPLOAD_MAX_MEMORY_SIZE a web thread.
    """

    @cached_property
    def fields(self) -> Any:
        bound = _bound_fields.__dict__.setdefault("by_class", {}).get(type(self))
        if bound is None:
            fields = serializers.Serializer.fields.func(self)  # type: ignore[attr-defined]
            _bound_fields.by_class[type(self)] = _Bound(fields)
            return fields
        bound.fields.serializer = self
        for field in bound.listed:
            field.parent = self
        return bound.fields

    def to_internal_value(self, data: Any) -> Any:
        """DRF's, but an optional field the JSON object leaves out is given its default here, as
        DRF gives it (its get_default, then the serializer's validate_<field>), instead of going
        through its get_value, run_validation and empty-value checks: most of a request's fields,
        and most of the time DRF took to validate one. An error of a default's validate_<field>
        (none raises one) would be reported on its own, not with the other fields' errors."""
        if type(data) is not dict or getattr(self, "partial", False):
            return super().to_internal_value(data)  # type: ignore[misc]
        self.fields  # noqa: B018 - bound to this serializer
        absent = [field for field in _bound_fields.by_class[type(self)].optional if field.field_name not in data]
        self._left_out = absent
        try:
            validated = super().to_internal_value(data)  # type: ignore[misc]
        finally:
            self._left_out = []
        for field in absent:
            try:
                value = field.get_default()
            except SkipField:
                continue
            validate = getattr(self, f"validate_{field.field_name}", None)
            if validate is not None:
                try:
                    value = validate(value)
                except serializers.ValidationError as exc:
                    raise serializers.ValidationError({field.field_name: exc.detail}) from None
            self.set_value(validated, field.source_attrs, value)  # type: ignore[attr-defined]
        return validated

    # DRF's own walk the fields' mapping through collections.abc on every validation; these read
    # the lists made with the fields. (Both as DRF has them: the fields the request may set, less
    # those it left out, and the read-only ones with a default, which no reused serializer has.)
    @property
    def _writable_fields(self) -> list[Any]:
        self.fields  # noqa: B018 - bound to this serializer
        writable = _bound_fields.by_class[type(self)].writable
        left_out = getattr(self, "_left_out", None)
        return [field for field in writable if field not in left_out] if left_out else list(writable)

    def _read_only_defaults(self) -> dict[str, Any]:
        self.fields  # noqa: B018 - bound to this serializer
        if _bound_fields.by_class[type(self)].read_only:
            return super()._read_only_defaults()  # type: ignore[misc, no-any-return]
        return {}


class _Bound:
    """One thread's fields of a ReusedFields serializer class, and the lists DRF asks for."""

    def __init__(self, fields: Any) -> None:
        self.fields = fields
        self.listed = list(fields.values())
        self.writable = [field for field in self.listed if not field.read_only]
        self.read_only = [field for field in self.listed if field.read_only]
        self.optional = [field for field in self.writable if not field.required]


# A request object that refuses a field it does not know, with a 400 naming it: a misspelt optional
# field (say "sned_at") would otherwise be dropped and the request done without it. The schema says
# so too (additionalProperties: false, api/schema.py). A comment, not a docstring: drf-spectacular
# would show a docstring as the description of every serializer that mixes this in.
class RefusesUnknownFields:
    def to_internal_value(self, data: Any) -> Any:
        known = self.fields  # type: ignore[attr-defined]
        unknown = sorted(set(data) - set(known)) if isinstance(data, dict) else []
        if unknown:
            raise serializers.ValidationError({unknown[0]: [f"unknown field; expected one of {', '.join(known)}"]})
        return super().to_internal_value(data)  # type: ignore[misc]


def _is_utf8_encodable(text: str) -> bool:
    try:
        text.encode()
    except UnicodeEncodeError:
        return False
    return True


class InAppFields(serializers.Serializer):  # type: ignore[type-arg]
    """The fields of a notification that only its in-app inbox item uses."""

    action_url = StrictCharField(
        max_length=2000,
        required=False,
        allow_blank=True,
        default="",
        help_text="In-app: where the inbox item links to, an http(s) URL.",
    )
    thread_key = StrictCharField(
        max_length=255,
        required=False,
        allow_blank=True,
        default="",
        help_text="In-app: the conversation the inbox item groups under (GET /inbox/items?thread=).",
    )

    def validate_action_url(self, value: str) -> str:
        if value:
            http_url(value, "action_url")
        return value
