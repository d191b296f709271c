"""A template render's budget: the work one message's render may do (a deadline, checked at every
node and every loop step) and the output it may make (counted as each node returns), so a render
stops itself at its bound and nothing is left running after the answer."""

from __future__ import annotations

import contextlib
import contextvars
import sys
import time
from collections.abc import Callable, Iterator
from typing import Any, NoReturn

from django.template.base import FilterExpression

from ...errors import RenderLimitExceeded

# What a render's filters may make, in all, per byte of output a part may have: a filter's result
# that never reaches the output (a {% with %} value, a {% regroup %} grouper, a step of a chain) is
# still memory held or work done, and 32 times what a message may say leaves any real template
# (a digest's conditions and truncations) far inside it while a process stays megabytes from harm.
MADE_PER_OUTPUT_BYTE = 32


class RenderBudget:
    """The work one message's render may do: until ``deadline`` (time.monotonic), and at most
    ``max_bytes`` of output per part (counted in characters while rendering, never more than the
    bytes; the finished part is measured in bytes), and its filters' results and the values its
    nodes keep at most MADE_PER_OUTPUT_BYTE times that in all (``made``, by sys.getsizeof)."""

    def __init__(self, *, seconds: float, max_bytes: int, what: str = "the template's render"):
        self.seconds = seconds
        self.what = what
        self.deadline = time.monotonic() + seconds
        self.max_bytes = max_bytes
        self.written = 0
        self.made = 0
        self.max_made = max_bytes * MADE_PER_OUTPUT_BYTE
        # The part's data (its copy the template renders with), and the ids of its objects once a
        # kept value needs them: the data's own objects are not made by the render.
        self.data: Any = None
        self._data_ids: set[int] | None = None
        # Per node being rendered, the output its children returned (counted already).
        self.children: list[int] = [0]

    def start_part(self, data: Any = None) -> None:
        self.written = 0
        self.children = [0]
        self.data = data
        self._data_ids = None

    def step(self) -> None:
        if time.monotonic() > self.deadline:
            raise RenderLimitExceeded(f"{self.what} exceeded {self.seconds:g} s", extra={"field": "template"})

    def write(self, size: int) -> None:
        self.written += size
        if self.written > self.max_bytes:
            self.exceeded()

    def made_by_filter(self, result: Any, value: Any) -> None:
        """Count what a filter call returned: nothing when it is its input (``default``, ``safe``
        of a safe string), else its size in memory, a list's text items by their length (CPython
        shares one-character strings, so ``make_list`` makes a slot, not a string, per character)."""
        if result is value:
            return
        size = sys.getsizeof(result)
        if isinstance(result, (list, tuple)):
            size += sum(len(item) for item in result if isinstance(item, (str, bytes)))
        self.made += size
        if self.made > self.max_made:
            raise RenderLimitExceeded(
                f"the template's filters and kept values made more than {self.max_made} bytes "
                f"({MADE_PER_OUTPUT_BYTE} times MAX_MESSAGE_BYTES)",
                extra={"field": "template"},
            )

    def kept(self, value: Any) -> None:
        """Count a value a node keeps in the context (a {% with %} value, a {% regroup %} grouper)
        unless the data holds it: a lookup can call a method of a value (``t.expandtabs`` makes
        eight times ``t``), which is no filter, and a {% with %} of thousands of them would hold
        gigabytes within one node."""
        if not isinstance(value, (str, bytes, list, tuple)):
            return
        if self._data_ids is None:
            self._data_ids = _object_ids(self.data)
        if id(value) not in self._data_ids:
            self.made_by_filter(value, None)

    def exceeded(self) -> NoReturn:
        raise RenderLimitExceeded(
            f"the template's output exceeds MAX_MESSAGE_BYTES ({self.max_bytes} bytes)", extra={"field": "template"}
        )


_BUDGET: contextvars.ContextVar[RenderBudget | None] = contextvars.ContextVar("template_render_budget", default=None)


class RenderPool:
    """Render time shared by the renders of one request that makes many messages (a batch), so
    its renders together stop at ``seconds`` of render work, not at ``seconds`` each."""

    def __init__(self, *, seconds: float, what: str):
        self.seconds = seconds
        self.what = what
        self.spent = 0.0


_POOL: contextvars.ContextVar[RenderPool | None] = contextvars.ContextVar("template_render_pool", default=None)


@contextlib.contextmanager
def render_pool(*, seconds: float, what: str) -> Iterator[RenderPool]:
    """The renders inside (each under its own render_budget) share ``seconds`` of render work."""
    pool = RenderPool(seconds=seconds, what=what)
    token = _POOL.set(pool)
    try:
        yield pool
    finally:
        _POOL.reset(token)


@contextlib.contextmanager
def render_budget(*, seconds: float, max_bytes: int) -> Iterator[RenderBudget]:
    """Renders inside are bounded by one budget (one message: its subject, body and HTML part);
    inside a render_pool, by what is left of the pool's too."""
    pool = _POOL.get()
    if pool is not None and pool.seconds - pool.spent <= seconds:
        budget = RenderBudget(seconds=pool.seconds, max_bytes=max_bytes, what=pool.what)
        budget.deadline = time.monotonic() + (pool.seconds - pool.spent)
    else:
        budget = RenderBudget(seconds=seconds, max_bytes=max_bytes)
    started = time.monotonic()
    try:
        with render_budget_applied(budget):
            yield budget
    finally:
        if pool is not None:
            pool.spent += time.monotonic() - started


@contextlib.contextmanager
def render_budget_applied(budget: RenderBudget) -> Iterator[RenderBudget]:
    """The renders inside are bounded by ``budget``, made by the caller (a job of its own process)."""
    token = _BUDGET.set(budget)
    try:
        yield budget
    finally:
        _BUDGET.reset(token)


def counted(render_annotated: Callable[[Any], Any]) -> Callable[[Any], Any]:
    """A node's render that checks the deadline first and counts the output it adds: its own
    output less its children's, which counted themselves (a loop adds nothing of its own, a
    ``spaceless`` takes some away), so the count is the output so far at every step."""

    def render(context: Any) -> Any:
        budget = _BUDGET.get()
        if budget is None:
            return render_annotated(context)
        budget.step()
        budget.children.append(0)
        try:
            output = render_annotated(context)
        finally:
            children = budget.children.pop()
        budget.write(len(output) - children)
        budget.children[-1] += len(output)
        return output

    return render


class _Steps:
    """What a ``{% for %}`` loops over, taking a step of the budget per item (an empty loop body
    renders no node that would)."""

    def __init__(self, values: Any):
        self.values = values if hasattr(values, "__len__") else list(values)

    def __len__(self) -> int:
        return len(self.values)

    def __iter__(self) -> Iterator[Any]:
        return self._stepped(iter(self.values))

    def __reversed__(self) -> Iterator[Any]:
        return self._stepped(reversed(self.values))

    @staticmethod
    def _stepped(items: Iterator[Any]) -> Iterator[Any]:
        budget = _BUDGET.get()
        for item in items:
            if budget is not None:
                budget.step()
            yield item


class SteppedSequence:
    """A ForNode's sequence expression whose value is iterated in budgeted steps."""

    def __init__(self, expression: FilterExpression):
        self.expression = expression

    def resolve(self, context: Any, ignore_failures: bool = False) -> Any:
        values = self.expression.resolve(context, ignore_failures=ignore_failures)
        return None if values is None else _Steps(values)

    def __str__(self) -> str:
        return str(self.expression)


class KeptValue:
    """An expression whose value its node keeps (``{% with %}``'s values, ``{% regroup %}``'s
    ``by``), counted by RenderBudget.kept as it resolves."""

    def __init__(self, expression: FilterExpression):
        self.expression = expression

    def resolve(self, context: Any, ignore_failures: bool = False) -> Any:
        value = self.expression.resolve(context, ignore_failures=ignore_failures)
        budget = _BUDGET.get()
        if budget is not None:
            budget.kept(value)
        return value

    def __str__(self) -> str:
        return str(self.expression)


def _object_ids(data: Any) -> set[int]:
    """The ids of the containers and strings of JSON-like ``data``, walked without recursion."""
    ids: set[int] = set()
    stack = [data]
    while stack:
        item = stack.pop()
        if isinstance(item, (str, bytes)):
            ids.add(id(item))
        elif isinstance(item, dict):
            ids.add(id(item))
            stack.extend(item.values())
        elif isinstance(item, (list, tuple)):
            ids.add(id(item))
            stack.extend(item)
    return ids


def current_budget() -> RenderBudget | None:
    """The budget of the render under way in this context, if any."""
    return _BUDGET.get()
