"""What a message template may use: an allow-list of Django's tags and filters whose widths and
counts are bounded, checked when a template is compiled (so a template that breaks them is refused
when stored, and never rendered), and its nodes counted against the render's budget
(template_budget) as they render."""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Iterator
from typing import Any

from django.template import Engine, Library, Template, TemplateSyntaxError
from django.template.base import FilterExpression, Lexer, Node, TokenType, Variable
from django.template.defaulttags import ForNode, LoremNode, RegroupNode, WithNode
from django.template.smartif import TokenBase

from ...errors import RenderLimitExceeded
from .template_budget import KeptValue, SteppedSequence, counted, current_budget

# Tags of Django's builtins a template may use. Left out: ``include``, ``extends``, ``block`` and
# ``load`` (other templates and tag libraries), ``debug`` (the whole context and the server's
# modules), ``url`` (the platform's own routes; a wrong name fails only when rendered),
# ``csrf_token`` and ``querystring`` (they need a web request, which a message has not).
# fmt: off
ALLOWED_TAGS = frozenset({
    "autoescape", "comment", "cycle", "filter", "firstof", "for", "if", "ifchanged", "lorem", "now",
    "regroup", "resetcycle", "spaceless", "templatetag", "verbatim", "widthratio", "with",
})
# fmt: on
# The tags above that enclose others up to an ``end…`` tag: what nesting depth counts.
ENCLOSING_TAGS = frozenset({"autoescape", "comment", "filter", "for", "if", "ifchanged", "spaceless", "verbatim", "with"})
# Filters of Django's builtins a template may use. Left out: ``pprint`` (Python's repr of a value,
# a debugging aid), ``unordered_list`` (recursive over nested data), ``urlize`` and
# ``urlizetrunc`` (regular expressions over the whole text, with a history of slow inputs).
# fmt: off
ALLOWED_FILTERS = frozenset({
    "add", "addslashes", "capfirst", "center", "cut", "date", "default", "default_if_none", "dictsort",
    "dictsortreversed", "divisibleby", "escape", "escapejs", "escapeseq", "filesizeformat", "first",
    "floatformat", "force_escape", "get_digit", "iriencode", "join", "json_script", "last", "length",
    "linebreaks", "linebreaksbr", "linenumbers", "ljust", "lower", "make_list", "phone2numeric",
    "pluralize", "random", "rjust", "safe", "safeseq", "slice", "slugify", "stringformat", "striptags",
    "time", "timesince", "timeuntil", "title", "truncatechars", "truncatechars_html", "truncatewords",
    "truncatewords_html", "upper", "urlencode", "wordcount", "wordwrap", "yesno",
})
# fmt: on
# A width (ljust, rjust, center), a width or precision in a stringformat spec, and floatformat's
# digits: far beyond any message's layout, far below what one call could allocate.
MAX_WIDTH = 1000
# {% lorem N %}: words or paragraphs; 100 paragraphs are ~25 KB.
MAX_LOREM_COUNT = 100
# Enclosing tags inside one another; Django compiles and renders them recursively, and about
# 1,000 levels exhaust Python's stack.
MAX_DEPTH = 32
# Words in one {% if %} or {% elif %}: its condition is evaluated recursively, one level a word.
MAX_CONDITION_WORDS = 64

_DIGITS = re.compile(r"\d+")


class TemplateRefused(TemplateSyntaxError):
    """A template that compiles but uses what a message template may not (see the module's rules)."""


# --- Bounded filters ----------------------------------------------------------------------------


def _whole_number(name: str, arg: Any, *, maximum: int) -> int:
    try:
        number = int(arg)
    except (TypeError, ValueError, OverflowError):
        number = None
    if number is None or abs(number) > maximum:
        raise RenderLimitExceeded(f"{name} takes a whole number up to {maximum}, not {arg!r}", extra={"field": "template"})
    return number


def _width_check(name: str, arg: Any) -> None:
    _whole_number(name, arg, maximum=MAX_WIDTH)


def _floatformat_check(name: str, arg: Any) -> None:
    # floatformat's argument is digits with "g" (grouping) or "u" (unlocalized) after them.
    _whole_number(name, str(arg).rstrip("gu") or "0", maximum=MAX_WIDTH)


def _stringformat_check(name: str, arg: Any) -> None:
    if any(int(digits) > MAX_WIDTH for digits in _DIGITS.findall(str(arg))):
        raise RenderLimitExceeded(
            f"{name} takes widths and precisions up to {MAX_WIDTH}, not {str(arg)!r}", extra={"field": "template"}
        )


_ARGUMENT_CHECKS: dict[str, Callable[[str, Any], None]] = {
    "ljust": _width_check,
    "rjust": _width_check,
    "center": _width_check,
    "floatformat": _floatformat_check,
    "stringformat": _stringformat_check,
}


def _join_check(value: Any, arg: Any) -> None:
    """``join``'s output is built in one call: a long separator between many items multiplies."""
    budget = current_budget()
    if budget is None or not hasattr(value, "__len__") or isinstance(value, str):
        return
    if len(str(arg)) * max(len(value) - 1, 0) > budget.max_bytes:
        budget.exceeded()


def _size_check(result: Any, value: Any) -> None:
    """A filter's result no longer than MAX_MESSAGE_BYTES: a filter can multiply its input
    (``addslashes`` doubles every backslash, ``add`` a value with itself), so a chain of them, or
    ``{% with %}`` inside ``{% with %}``, would grow it exponentially within one node, between two
    of the budget's steps. And counted against what the render's filters may make in all: results
    that never reach the output (``{% regroup %}``'s groupers, a chain's steps) are held or
    thrown away within one node, where the output count never sees them (issue #36)."""
    budget = current_budget()
    if budget is None:
        return
    if isinstance(result, (str, list, tuple)) and len(result) > budget.max_bytes:
        budget.exceeded()
    budget.made_by_filter(result, value)


def _bounded(name: str, func: Callable[..., Any]) -> Callable[..., Any]:
    """``func`` with a step of the render's budget first (a node can call thousands of filters:
    a long chain, a {% with %} of many values, {% regroup %}'s expression once per item), its
    argument checked (the same check as when stored, for an argument that comes from data), and
    its result's size after."""
    check = _ARGUMENT_CHECKS.get(name)

    @functools.wraps(func)
    def bounded(value: Any, *args: Any, **kwargs: Any) -> Any:
        budget = current_budget()
        if budget is not None:
            budget.step()
        if args and name == "join":
            _join_check(value, args[0])
        elif args and check is not None:
            check(name, args[0])
        result = func(value, *args, **kwargs)
        _size_check(result, value)
        return result

    return bounded


def template_engine(*, string_if_invalid: Any) -> Engine:
    """Django's engine with only the allowed tags and filters, the bounded ones wrapped."""
    engine = Engine(string_if_invalid=string_if_invalid, loaders=[], libraries={})
    allowed = Library()
    for library in engine.template_builtins:
        allowed.tags.update({name: tag for name, tag in library.tags.items() if name in ALLOWED_TAGS})
        allowed.filters.update({name: _bounded(name, f) for name, f in library.filters.items() if name in ALLOWED_FILTERS})
    # The parser reads the builtins from here; Django's own libraries stay untouched.
    engine.template_builtins = [allowed]
    return engine


# --- Checks when compiled -----------------------------------------------------------------------


def template_compile(engine: Engine, source: str) -> Template:
    """``source`` compiled, checked and with its render counted; TemplateSyntaxError when it does
    not compile, TemplateRefused when it breaks the bounds."""
    _nesting_check(source)
    try:
        template = engine.from_string(source)
    except RecursionError:
        raise TemplateRefused("it nests too deep to compile") from None
    filter_names = {func: name for name, func in engine.template_builtins[0].filters.items()}
    for node in template.nodelist.get_nodes_by_type(Node):
        _node_check(node, filter_names)
        if isinstance(node, ForNode) and isinstance(node.sequence, FilterExpression):
            node.sequence = SteppedSequence(node.sequence)  # type: ignore[assignment]
        # {% regroup %} resolves its ``by`` expression for every item within its one node, and
        # keeps a grouper per group; {% with %} keeps every value it names at once.
        if isinstance(node, RegroupNode) and isinstance(node.target, FilterExpression):
            node.target = SteppedSequence(node.target)  # type: ignore[assignment]
            node.expression = KeptValue(node.expression)  # type: ignore[assignment]
        if isinstance(node, WithNode):
            node.extra_context = {name: KeptValue(value) for name, value in node.extra_context.items()}
        node.render_annotated = counted(node.render_annotated)  # type: ignore[method-assign, assignment]
    return template


def _nesting_check(source: str) -> None:
    """Depth of enclosing tags and length of conditions, from the tokens (no recursion)."""
    depth = 0
    in_comment = False
    for token in Lexer(source).tokenize():
        if token.token_type != TokenType.BLOCK:
            continue
        words = token.contents.split()
        name = words[0] if words else ""
        if in_comment:  # a comment's tags are not compiled
            if name == "endcomment":
                in_comment = False
                depth -= 1
            continue
        if name in ENCLOSING_TAGS:
            depth += 1
            in_comment = name == "comment"
            if depth > MAX_DEPTH:
                raise TemplateRefused(f"tags nest deeper than {MAX_DEPTH} levels (line {token.lineno})")
        elif name.startswith("end"):
            depth -= 1
        if name in ("if", "elif") and len(words) > MAX_CONDITION_WORDS:
            raise TemplateRefused(f"a condition is longer than {MAX_CONDITION_WORDS} words (line {token.lineno})")


def _is_literal(value: Any) -> bool:
    return not isinstance(value, Variable) or value.lookups is None


def _literal(value: Any) -> Any:
    return value.literal if isinstance(value, Variable) else value


def _node_check(node: Node, filter_names: dict[Callable[..., Any], str]) -> None:
    token = getattr(node, "token", None)
    line = f"line {token.lineno}" if token is not None else "a tag"
    if isinstance(node, ForNode) and isinstance(node.sequence, FilterExpression) and _is_literal(node.sequence.var):
        raise TemplateRefused(f"{{% for %}} loops over data, not over a literal ({line})")
    if isinstance(node, LoremNode):
        count = node.count
        if not (_is_literal(count.var) and not count.filters and 0 <= _lorem_count(count.var) <= MAX_LOREM_COUNT):
            raise TemplateRefused(f"{{% lorem %}} takes a number from 0 to {MAX_LOREM_COUNT} ({line})")
    for expression in _expressions(vars(node)):
        for func, args in expression.filters:
            name = filter_names.get(func, "")
            check = _ARGUMENT_CHECKS.get(name)
            for _, arg in args:
                if check is not None and _is_literal(arg):
                    try:
                        check(name, _literal(arg))
                    except RenderLimitExceeded as exc:
                        raise TemplateRefused(f"{exc.message} ({line})") from None


def _lorem_count(value: Any) -> int:
    try:
        return int(_literal(value))
    except (TypeError, ValueError, OverflowError):
        return -1


def _expressions(value: Any) -> Iterator[FilterExpression]:
    """The filter expressions a node holds: as attributes, in lists and dicts ({% with %}, {%
    cycle %}), and in an {% if %}'s conditions (whose size the nesting check bounds)."""
    if isinstance(value, FilterExpression):
        yield value
    elif isinstance(value, dict):
        for item in value.values():
            yield from _expressions(item)
    elif isinstance(value, (list, tuple)) and not isinstance(value, str):
        for item in value:
            if not isinstance(item, Node):
                yield from _expressions(item)
    elif isinstance(value, TokenBase):
        for part in ("value", "first", "second"):
            yield from _expressions(getattr(value, part, None))
