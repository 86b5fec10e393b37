"""No import circles inside modelforge: two modules that import each other are one concept or a wrong cut.

Every import counts, those inside functions too (a lazy import only hides a circle). An import of
a package's name (``from modelforge.data import decoded_cache``) counts as an import of the
submodule when it names one, else of the package's ``__init__``.
"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "modelforge"


def _module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def import_graph() -> dict[str, set[str]]:
    """Module -> the modelforge modules it imports."""
    modules = {_module_name(p): p for p in PACKAGE.rglob("*.py")}
    graph: dict[str, set[str]] = {name: set() for name in modules}
    for name, path in modules.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:  # relative: resolve against this module's package
                    base = ".".join([*package.split(".")[: len(package.split(".")) - node.level + 1], base]).strip(".")
                targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base for a in node.names]
            graph[name] |= {t for t in targets if t in modules and t != name}
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_the_checker_finds_a_circle() -> None:
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_no_import_circle_in_modelforge() -> None:
    assert cycles(import_graph()) == []


# Layers that must not reach up: (importer's package, packages it must not import). The sweep attaches its
# callbacks to a run from above (cli/), deploy/ and train/ write through files/, and a model builds without the
# inspection layer that describes it.
FORBIDDEN = [
    ("modelforge.files", ("modelforge.train", "modelforge.deploy", "modelforge.sweep", "modelforge.cli",
                          "modelforge.models", "modelforge.layers", "modelforge.hooks", "modelforge.inspect")),
    ("modelforge.layers", ("modelforge.inspect", "modelforge.train", "modelforge.deploy", "modelforge.sweep",
                           "modelforge.cli", "modelforge.hooks", "modelforge.models")),
    ("modelforge.models", ("modelforge.inspect", "modelforge.train", "modelforge.deploy", "modelforge.sweep",
                           "modelforge.cli", "modelforge.hooks")),
    ("modelforge.deploy", ("modelforge.train", "modelforge.sweep", "modelforge.cli")),
    ("modelforge.train", ("modelforge.sweep", "modelforge.cli")),
    # What a run shows sits below the training loop, which passes it what it needs of a run (rank, epoch counts).
    ("modelforge.report", ("modelforge.train", "modelforge.deploy", "modelforge.sweep", "modelforge.cli",
                           "modelforge.hooks", "modelforge.models", "modelforge.layers")),
]


def upward_imports(graph: dict[str, set[str]]) -> list[str]:
    found = []
    for package, above in FORBIDDEN:
        for module in sorted(m for m in graph if m == package or m.startswith(package + ".")):
            found += [f"{module} -> {t}" for t in sorted(graph[module]) if t.startswith(above)]
    return found


def test_the_layer_checker_finds_an_upward_import() -> None:
    assert upward_imports({"modelforge.train.run": {"modelforge.sweep.pruning"}}) == [
        "modelforge.train.run -> modelforge.sweep.pruning"]


def test_no_layer_imports_one_above_it() -> None:
    assert upward_imports(import_graph()) == []
