"""`deferred(name)`: a stand-in for a module that imports it when one of its attributes is first read.

The CLIs check their flags before torch loads (ARCHITECTURE.md, "Flags first, then torch"): a typo, `--help` or
a missing path answers in a moment instead of after seconds of imports. What the command then runs with is
named at the top of the script as deferred modules, imported once the flags passed.

A plain object, not a lazy entry in sys.modules (importlib's LazyLoader): tools that walk sys.modules, as
torch's own import does through `inspect`, would load such entries at random moments.
"""

from __future__ import annotations

import importlib
import types


class deferred:  # noqa: N801 -- read as a module name where it is used: `loop = deferred(".loop", __package__)`
    """The module `name` (relative to `package`, as importlib.import_module takes them), imported when one of its
    attributes is first read or set (a test's monkeypatch)."""

    # No instance __dict__: reading `__dict__` reaches the module's, as for the other attributes. pytest's
    # monkeypatch (9.2) takes the value to restore from the target's __dict__; from a stand-in's own it would find
    # nothing and delete the module's attribute on undo.
    __slots__ = ("_where",)

    def __init__(self, name: str, package: str | None = None) -> None:
        object.__setattr__(self, "_where", (name, package))

    def _module(self) -> types.ModuleType:
        return importlib.import_module(*object.__getattribute__(self, "_where"))  # after the first: sys.modules

    def __getattr__(self, attribute: str):
        return getattr(self._module(), attribute)

    def __setattr__(self, attribute: str, value) -> None:
        setattr(self._module(), attribute, value)

    def __delattr__(self, attribute: str) -> None:
        delattr(self._module(), attribute)

    def __repr__(self) -> str:
        name, package = object.__getattribute__(self, "_where")
        return f"<deferred module {name!r}{f' in {package!r}' if package else ''}>"
