"""The options of template work, a group of the app's options (app.py): a render's budget, the
compiled templates a process keeps, and the sandbox that renders stored templates under OS limits
(services/policy/render_sandbox.py)."""

from __future__ import annotations

from .option import Option, group

TEMPLATE_WORK_OPTIONS: tuple[Option, ...] = group(
    "Template work (a render's budget, the compiled-template cache, the render sandbox)",
    Option(
        "TEMPLATE_RENDER_SECONDS",
        float,
        1.0,
        "work a message's render may do (subject, body and HTML part); past it: 400 `render_limit`",
        minimum=0.001,
    ),
    Option(
        "TEMPLATE_CACHE_BYTES",
        int,
        64 * 1024 * 1024,
        "compiled templates a process keeps, by their measured size (the least recently used go first)",
        minimum=0,
    ),
    Option(
        "TEMPLATE_SANDBOX_PROCESSES",
        int,
        2,
        "processes that render stored templates under OS limits, per web or worker process (0: in the process itself)",
        minimum=0,
        maximum=64,
    ),
    Option(
        "TEMPLATE_SANDBOX_MEMORY_BYTES",
        int,
        256 * 1024 * 1024,
        "address space a sandbox process may add past its start (RLIMIT_AS); past it, killed: `render_limit`",
        minimum=16 * 1024 * 1024,
    ),
    Option(
        "TEMPLATE_SANDBOX_CPU_SECONDS",
        int,
        3,
        "CPU seconds one render may take in a sandbox process (RLIMIT_CPU); past it, killed: `render_limit`",
        minimum=1,
    ),
)
