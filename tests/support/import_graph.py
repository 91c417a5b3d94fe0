"""What importing a module loads, read from the sources without running any of them.

A static model of the import system: a module runs its import-time statements (those at module
level and in class bodies, in every branch of ``if``, ``try`` and ``with``; not those in function
bodies, nor under ``if TYPE_CHECKING:``), and importing ``a.b.c`` first runs ``a`` and ``a.b``.
Sources are found as the import system finds them (:class:`importlib.machinery.PathFinder`, no
package imported to look), and third-party packages are followed too, since one can load another
(Celery loads Kombu). The standard library, extension modules and names without a source file
are leaves.

The model over-approximates (both branches of an ``if`` or a ``try`` count) and cannot see an
import made by calling ``importlib.import_module`` or ``__import__``; ``tests/unit/test_layers.py``
holds it to a real interpreter for a few modules.
"""

from __future__ import annotations

import ast
import sys
from collections.abc import Iterable, Iterator, Mapping, Sequence
from importlib.machinery import ModuleSpec, PathFinder

#: Top-level names never followed: the standard library imports nothing from site-packages.
_STDLIB = frozenset(sys.stdlib_module_names) | {"__future__", "__main__"}


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _import_time_nodes(body: Iterable[ast.stmt]) -> Iterator[ast.Import | ast.ImportFrom]:
    """The import statements of ``body`` that run when their module is imported (expressions
    hold none, so only statements are searched)."""
    for node in body:
        if isinstance(node, ast.Import | ast.ImportFrom):
            yield node
        elif isinstance(node, ast.If) and _is_type_checking(node.test):
            yield from _import_time_nodes(node.orelse)
        elif isinstance(node, ast.ClassDef | ast.With | ast.AsyncWith):
            yield from _import_time_nodes(node.body)
        elif isinstance(node, ast.If | ast.For | ast.AsyncFor | ast.While):
            yield from _import_time_nodes([*node.body, *node.orelse])
        elif isinstance(node, ast.Try | ast.TryStar):
            handlers = [s for h in node.handlers for s in h.body]
            yield from _import_time_nodes([*node.body, *handlers, *node.orelse, *node.finalbody])
        elif isinstance(node, ast.Match):
            yield from _import_time_nodes([s for case in node.cases for s in case.body])


def parents(name: str) -> list[str]:
    """``a.b.c`` -> ``["a", "a.b", "a.b.c"]``: what importing ``name`` runs, in order."""
    parts = name.split(".")
    return [".".join(parts[: n + 1]) for n in range(len(parts))]


class ImportGraph:
    """The import-time import graph of the modules found on ``path`` (``sys.path`` if None)."""

    def __init__(
        self, path: Sequence[str] | None = None, hidden: Mapping[str, Iterable[str]] | None = None
    ) -> None:
        """``hidden``: imports a module makes that its sources do not show (a function called at
        import time that imports), by importing module."""
        self._path = list(path) if path is not None else None
        self._hidden = {name: frozenset(targets) for name, targets in (hidden or {}).items()}
        self._specs: dict[str, ModuleSpec | None] = {}
        self._edges: dict[str, frozenset[str]] = {}

    def spec(self, name: str) -> ModuleSpec | None:
        """Where ``name``'s module is; None when no module has that name."""
        if name not in self._specs:
            parent, _, _ = name.rpartition(".")
            if not parent:
                found = PathFinder.find_spec(name, self._path)
            else:
                outer = self.spec(parent)
                locations = None if outer is None else outer.submodule_search_locations
                found = None if locations is None else PathFinder.find_spec(name, list(locations))
            self._specs[name] = found
        return self._specs[name]

    def exists(self, name: str) -> bool:
        return self.spec(name) is not None

    def imports(self, name: str) -> frozenset[str]:
        """The modules ``name``'s own import-time statements name (absolute, existing ones)."""
        if name not in self._edges:
            self._edges[name] = frozenset(self._read(name)) | self._hidden.get(name, frozenset())
        return self._edges[name]

    def _read(self, name: str) -> set[str]:
        spec = self.spec(name)
        if (
            name.split(".")[0] in _STDLIB
            or spec is None
            or spec.origin is None
            or not spec.origin.endswith(".py")
        ):
            return set()
        with open(spec.origin, "rb") as source:
            tree = ast.parse(source.read(), filename=spec.origin)
        is_package = spec.submodule_search_locations is not None
        package = name.split(".") if is_package else name.split(".")[:-1]
        named: set[str] = set()
        for node in _import_time_nodes(tree.body):
            if isinstance(node, ast.Import):
                named.update(alias.name for alias in node.names)
                continue
            base = node.module or ""
            if node.level:
                up = package[: len(package) - node.level + 1]
                base = ".".join([*up, node.module] if node.module else up)
            named.add(base)
            # `from package import name` imports the submodule `name` when there is one.
            named.update(
                f"{base}.{alias.name}"
                for alias in node.names
                if alias.name != "*" and self.exists(f"{base}.{alias.name}")
            )
        return {n for n in named if n != name and self.exists(n)}

    def loaded_by(self, names: Iterable[str]) -> set[str]:
        """Every module that importing ``names`` (in a fresh interpreter) runs."""
        seen: set[str] = set()
        todo = [p for name in names for p in parents(name)]
        while todo:
            module = todo.pop()
            if module in seen or not self.exists(module):
                continue
            seen.add(module)
            todo.extend(p for target in self.imports(module) for p in parents(target))
        return seen

    def chain(self, start: str, goal: str) -> list[str]:
        """A shortest import chain by which importing ``start`` loads ``goal``'s package (a
        top-level name); empty when it does not."""
        came_from: dict[str, str | None] = {}
        todo: list[tuple[str, str | None]] = [(p, None) for p in parents(start)]
        while todo:
            batch, todo = todo, []
            for module, prev in batch:
                if module in came_from or not self.exists(module):
                    continue
                came_from[module] = prev
                if module.split(".")[0] == goal:
                    found: list[str] = []
                    step: str | None = module
                    while step is not None:
                        found.append(step)
                        step = came_from[step]
                    return found[::-1]
                todo += [(p, module) for t in self.imports(module) for p in parents(t)]
        return []


def top_level(modules: Iterable[str]) -> set[str]:
    """The distributions' import names among ``modules``: ``sqlalchemy.orm`` -> ``sqlalchemy``."""
    return {m.split(".")[0] for m in modules}


def third_party(modules: Iterable[str]) -> set[str]:
    """:func:`top_level` without the standard library and the modules that the interpreter
    makes up, which no package holds: multiprocessing's alias of ``__main__``, the Cython
    runtime's, the interpreter's build settings."""
    return {
        name
        for name in top_level(modules) - _STDLIB - {"__mp_main__", "cython_runtime"}
        if not name.startswith(("_cython_", "_sysconfigdata_"))
    }
