"""The Django project package, which also stands in for the standard library's ``platform``.

Our project package is called ``platform`` (the product's layout fixes it), so whenever the repo
root is on ``sys.path`` every ``import platform`` in the process -- ``uuid``, ``pika``, pytest's
terminal reporter -- resolves to this package instead of the standard module. Rather than rename
it, we make the package a faithful superset of the standard module: the standard ``platform.py``
is loaded from the interpreter's own stdlib directory under a private name and every public and
private attribute is re-exported here. ``platform.system()``, ``platform.python_version()`` and
friends therefore behave exactly as usual, while ``platform.settings`` and ``platform.urls`` are
ordinary submodules. ``tests/test_stdlib_platform.py`` proves both halves.

The one thing this cannot fix is a process that imported the *standard* module before the repo
root was on ``sys.path``: then ``platform.settings`` cannot be found. Every entry point we ship
therefore runs as ``python manage.py ...`` or ``python -m <tool>`` from the repo root, which puts
the root first on ``sys.path`` before anything else is imported.
"""

from __future__ import annotations

import importlib.util as _importlib_util
import os as _os
import sys as _sys
import sysconfig as _sysconfig

_STDLIB_NAME = "_stdlib_platform"


def _load_stdlib_platform():  # type: ignore[no-untyped-def]
    if _STDLIB_NAME in _sys.modules:
        return _sys.modules[_STDLIB_NAME]
    path = _os.path.join(_sysconfig.get_paths()["stdlib"], "platform.py")
    spec = _importlib_util.spec_from_file_location(_STDLIB_NAME, path)
    if spec is None or spec.loader is None:  # pragma: no cover - a broken interpreter install
        raise ImportError(f"cannot load the standard platform module from {path}")
    module = _importlib_util.module_from_spec(spec)
    _sys.modules[_STDLIB_NAME] = module
    spec.loader.exec_module(module)
    return module


_stdlib_platform = _load_stdlib_platform()
_OWN_DUNDERS = {
    "__name__",
    "__file__",
    "__path__",
    "__package__",
    "__spec__",
    "__loader__",
    "__builtins__",
    "__cached__",
    "__doc__",
}
globals().update({name: value for name, value in vars(_stdlib_platform).items() if name not in _OWN_DUNDERS})
