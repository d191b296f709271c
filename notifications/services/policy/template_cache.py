"""Compiled message templates kept by a process, bounded by their measured size in bytes
(TEMPLATE_CACHE_BYTES), the least recently used dropped first."""

from __future__ import annotations

import gc
import sys
import threading
import types
from collections import OrderedDict
from collections.abc import Callable

from django.template import Engine, Template
from django.template.base import Origin

from ...conf import get_config

# Shared by every template, never a template's own: the engine (its libraries), where a template
# came from, and code (classes, modules, the filters' functions).
_SHARED = (Engine, Origin, type, types.ModuleType, types.BuiltinFunctionType, types.CodeType)


def compiled_size(template: Template) -> int:
    """The bytes a compiled template holds: sys.getsizeof of every object reachable from it that
    is its own (nodes, tokens, filter expressions, their strings, lists and dicts, the per-node
    closures template_bounds adds), each once. A walk rather than tracemalloc's delta around the
    compile: tracemalloc is one switch for the whole process (slow while on, and a compile in one
    thread would count another's allocations), and a walk measures the same objects every time.
    It leaves out the allocator's overhead (pymalloc's pools and free slots) and what compiling
    left behind elsewhere: for the issue's 64 KB template of ``{{a}}`` it says 8.9 MB where
    tracemalloc counts 10.7 MB (83 %), a margin tests/test_template_cache.py keeps in check."""
    seen: set[int] = set()
    stack: list[object] = [template]
    total = 0
    while stack:
        item = stack.pop()
        if id(item) in seen or isinstance(item, _SHARED):
            continue
        seen.add(id(item))
        total += sys.getsizeof(item)
        if isinstance(item, (str, bytes, int, float, bool)) or item is None:
            continue
        if isinstance(item, types.FunctionType):
            # A closure's cells only: its globals and code are the module's.
            stack.extend(cell.cell_contents for cell in item.__closure__ or ())
        elif isinstance(item, types.MethodType):
            stack.append(item.__self__)
        else:
            # What the garbage collector sees it hold (an instance's attributes without making
            # its __dict__, which vars() would allocate).
            stack.extend(gc.get_referents(item))
    return total


class CompiledTemplates:
    """Compiled templates by source, at most ``max_bytes`` of them (compiled_size) in all; one
    larger than that alone is compiled for each render and never kept. Thread-safe: the web
    process's threads and a worker's share it (two threads compiling one source both compile,
    and one copy is kept)."""

    def __init__(self, *, max_bytes: int):
        self.max_bytes = max_bytes
        self.size = 0
        self._templates: OrderedDict[str, tuple[Template, int]] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, source: str, compile_source: Callable[[str], Template]) -> Template:
        with self._lock:
            kept = self._templates.get(source)
            if kept is not None:
                self._templates.move_to_end(source)
                return kept[0]
        template = compile_source(source)
        size = compiled_size(template)
        if size > self.max_bytes:
            return template
        with self._lock:
            if source not in self._templates:
                self._templates[source] = (template, size)
                self.size += size
            while self.size > self.max_bytes:
                _, (_, dropped) = self._templates.popitem(last=False)
                self.size -= dropped
        return template

    def __len__(self) -> int:
        return len(self._templates)


_CACHE: CompiledTemplates | None = None
_CACHE_LOCK = threading.Lock()


def compiled_templates() -> CompiledTemplates:
    """This process's cache, made again (empty) when TEMPLATE_CACHE_BYTES changes (a test's override)."""
    global _CACHE
    max_bytes = get_config().template_cache_bytes
    with _CACHE_LOCK:
        if _CACHE is None or _CACHE.max_bytes != max_bytes:
            _CACHE = CompiledTemplates(max_bytes=max_bytes)
        return _CACHE
