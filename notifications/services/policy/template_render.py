"""The work done on a template's source, in whichever process does it: a message's parts rendered
under one budget, or a source checked when stored. Each is a job of plain JSON-safe values (no
model, no database), so render_sandbox can hand it to a process of its own."""

from __future__ import annotations

import copy
from dataclasses import asdict, dataclass
from typing import Any, ClassVar

from django.template import Context, Template, TemplateSyntaxError, VariableDoesNotExist

from ...errors import RenderLimitExceeded, TemplateRenderFailed, ValidationFailed
from .template_bounds import TemplateRefused, template_compile, template_engine
from .template_budget import RenderBudget, render_budget_applied
from .template_cache import compiled_templates

MAX_SOURCE_BYTES = 64 * 1024


class MissingVariable(Exception):
    def __init__(self, name: str):
        super().__init__(name)
        self.name = name


class _RaiseOnMissing(str):
    """The engine's ``string_if_invalid``: Django renders a ``{{ var }}`` it cannot resolve as
    ``string_if_invalid % var`` when that holds "%s" (FilterExpression.resolve), so this raises
    instead, naming the variable. ``{% if var %}`` and ``{% for x in var %}`` resolve with
    ``ignore_failures`` and never get here, so optional parts can still be written that way."""

    def __mod__(self, variable: object) -> str:
        raise MissingVariable(str(variable))


ENGINE = template_engine(string_if_invalid=_RaiseOnMissing("%s"))


def template_source_compile(source: str) -> Template:
    """``source`` compiled and checked (template_bounds), not kept."""
    return template_compile(ENGINE, source)


def _compiled(source: str) -> Template:
    """``source`` compiled, from this process's cache (at most TEMPLATE_CACHE_BYTES of them)."""
    return compiled_templates().get(source, template_source_compile)


@dataclass(frozen=True)
class SourceCheck:
    """A source checked when stored: ValidationFailed naming ``field`` when it is too long, does
    not compile, or uses what a template may not (template_bounds)."""

    kind: ClassVar[str] = "check"
    source: str
    field: str

    def run(self) -> list[str]:
        if len(self.source.encode()) > MAX_SOURCE_BYTES:
            raise ValidationFailed(f"{self.field} is over {MAX_SOURCE_BYTES} bytes", extra={"field": self.field})
        try:
            # Compiled and thrown away: a template stored is cached when it renders, and one refused
            # (or a PUT's 100 parts of 64 KB) never takes a process's cache.
            template_source_compile(self.source)
        except TemplateRefused as exc:
            raise ValidationFailed(f"{self.field} is refused: {exc}", extra={"field": self.field}) from None
        except TemplateSyntaxError as exc:
            raise ValidationFailed(f"{self.field} does not compile: {exc}", extra={"field": self.field}) from None
        return []


@dataclass(frozen=True)
class PartsRender:
    """A message's parts (``sources``, the HTML ones autoescaped) rendered with ``data`` under one
    budget: ``max_bytes`` of output a part, and work until ``remaining_seconds`` from now (of the
    ``seconds`` its error names: a batch's renders share theirs)."""

    kind: ClassVar[str] = "render"
    sources: list[str]
    html: list[bool]
    data: dict[str, Any]
    seconds: float
    remaining_seconds: float
    max_bytes: int
    what: str

    def run(self) -> list[str]:
        budget = RenderBudget(seconds=self.seconds, max_bytes=self.max_bytes, what=self.what)
        budget.deadline -= self.seconds - self.remaining_seconds
        with render_budget_applied(budget):
            return [
                _render(source, self.data, html=html, budget=budget) for source, html in zip(self.sources, self.html, strict=True)
            ]


TemplateJob = SourceCheck | PartsRender
JOB_KINDS: dict[str, type[SourceCheck] | type[PartsRender]] = {job.kind: job for job in (SourceCheck, PartsRender)}


def template_job_json(job: TemplateJob) -> dict[str, Any]:
    return {"kind": job.kind, **asdict(job)}


def template_job_from_json(value: dict[str, Any]) -> TemplateJob:
    fields = dict(value)
    return JOB_KINDS[fields.pop("kind")](**fields)


def _render(source: str, data: dict[str, Any], *, html: bool, budget: RenderBudget) -> str:
    if not source:
        return ""
    try:
        # A copy each time: a template may call a method of a value ({{ items.pop }}).
        copied = copy.deepcopy(data)
        budget.start_part(copied)
        rendered = _compiled(source).render(Context(copied, autoescape=html))
        # A plain str: render() marks its output safe, and a page showing this text (the admin's
        # preview) must escape it, since a client wrote the template.
        output = "".join([rendered])
        if len(output.encode()) > budget.max_bytes:
            budget.exceeded()
        return output
    except RecursionError:  # data nested deeper than Python's stack (deepcopy, a filter)
        raise RenderLimitExceeded("the template's data nests too deep to render", extra={"field": "template"}) from None
    except MemoryError:  # render_sandbox's process past its memory limit: it is replaced
        raise
    except MissingVariable as exc:
        name = exc.name
    except VariableDoesNotExist as exc:  # a filter's argument: {{ a|default:b }} without b
        name = str(exc.params[0]) if exc.params else "?"
    except TemplateRefused as exc:  # saved before today's bounds: never rendered (and never will be)
        raise TemplateRenderFailed(f"the template is refused: {exc}", extra={"field": "template"}) from None
    except TemplateSyntaxError as exc:  # saved before the checks (the admin's raw form, say)
        raise TemplateRenderFailed(f"the template does not compile: {exc}", extra={"field": "template"}) from None
    except TemplateRenderFailed:
        raise
    except Exception as exc:
        # Anything else a render raises fails the same way with the same data: a filter's bad
        # argument ({{ "a"|ljust:"b" }}), {% url %} of no route, a render past its bounds.
        cause = exc.message if isinstance(exc, ValidationFailed) else f"{type(exc).__name__}: {exc}"
        raise TemplateRenderFailed(f"the template could not be rendered: {cause}"[:500], extra={"field": "template"}) from exc
    raise ValidationFailed(f"the template uses {{{{ {name} }}}} but data has no {name!r}", extra={"field": f"data.{name}"})
