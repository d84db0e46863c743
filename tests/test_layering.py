"""dplint's modules import one another in one direction only: no import circle.

The import graph is read from the source with `ast`; nothing is imported. Every import
statement counts, wherever it stands: at module level, inside a function (a lazy import that
closes a circle is still a circle, only hidden from the import system), and under
`if TYPE_CHECKING:` (a type checker follows it). `import dplint.a.b` is an arrow to
`dplint.a.b`; `from dplint.a import b` to the module `dplint.a.b` when there is one, else
to `dplint.a`; relative imports are resolved against the importing module's package.
The registry's loading of the rule modules by name (`importlib.import_module`) is no import
statement and no arrow here.

The modules are those installed under `dplint`: `dplint/` and its subpackages, `rules/`
(installed as `dplint.rules`) and `runtime_check/` (`dplint.runtime_check`, torch's side).
"""

from __future__ import annotations

import ast
from pathlib import Path

from conftest import ROOT

# Where each installed package's source lives (pyproject's `package-dir`).
PACKAGE_DIRS = {"dplint": "dplint", "dplint.rules": "rules", "dplint.runtime_check": "runtime_check"}
RULES_PACKAGE = "dplint.rules"

# Arrows known to point up, each closing a circle that the files' owners still have to undo.
# Each is listed with what it does and what would remove it; the test below fails once the
# arrow is gone, so the entry goes with it. None today: a new circle is a failure.
KNOWN_BACK_EDGES: dict[tuple[str, str], str] = {}


def module_files(root: Path) -> dict[str, Path]:
    """{dotted module name: its file} for every module of the installed packages under `root`."""
    found = {}
    for package, folder in PACKAGE_DIRS.items():
        for path in sorted((root / folder).rglob("*.py")):
            parts = list(path.relative_to(root / folder).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            found[".".join([package, *parts])] = path
    return found


def imported_names(module: str, path: Path, modules: dict[str, Path]) -> list[tuple[str, int]]:
    """(dotted name, line) of each module an import statement of `module` names."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    names = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            names.extend((alias.name, node.lineno) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                source = ".".join([*base, *([node.module] if node.module else [])])
            else:
                source = node.module or ""
            for alias in node.names:
                submodule = f"{source}.{alias.name}"
                names.append((submodule if submodule in modules else source, node.lineno))
    return names


def import_graph(root: Path) -> dict[str, dict[str, list[str]]]:
    """{module: {module it imports: ["file:line", ...]}} over the installed packages' modules."""
    modules = module_files(root)
    graph: dict[str, dict[str, list[str]]] = {module: {} for module in modules}
    for module, path in modules.items():
        for name, line in imported_names(module, path, modules):
            while name and name not in modules:  # `import dplint.a.b` names module dplint.a.b
                name = name.rpartition(".")[0]
            if name and name != module:
                graph[module].setdefault(name, []).append(f"{path.relative_to(root)}:{line}")
    return graph


def circles(graph: dict[str, dict[str, list[str]]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(module: str) -> None:
        index[module] = low[module] = len(index)
        stack.append(module)
        on_stack.add(module)
        for target in graph[module]:
            if target not in index:
                visit(target)
                low[module] = min(low[module], low[target])
            elif target in on_stack:
                low[module] = min(low[module], index[target])
        if low[module] == index[module]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == module:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for module in sorted(graph):
        if module not in index:
            visit(module)
    return sorted(found)


def one_circle(graph: dict[str, dict[str, list[str]]], component: list[str]) -> str:
    """A shortest circle through the component's first module, each arrow with where it is."""
    start, members = component[0], set(component)
    came_from: dict[str, str] = {}
    frontier = [start]
    while frontier and start not in came_from:
        following = []
        for module in frontier:
            for target in sorted(graph[module]):
                if target in members and target not in came_from:
                    came_from[target] = module
                    following.append(target)
        frontier = following
    path = [start]
    while path[-1] != start or len(path) == 1:
        path.append(came_from[path[-1]])
    path.reverse()
    return " -> ".join([path[0], *(f"{b} ({graph[a][b][0]})" for a, b in zip(path, path[1:]))])


def without(graph: dict[str, dict[str, list[str]]], edges) -> dict[str, dict[str, list[str]]]:
    return {module: {t: lines for t, lines in targets.items() if (module, t) not in edges} for module, targets in graph.items()}


def describe(graph: dict[str, dict[str, list[str]]]) -> str:
    return "\n".join(f"{len(component)} modules {component}:\n  {one_circle(graph, component)}" for component in circles(graph))


# ----------------------------------------------------------------------------------- the tests
def test_no_import_circle():
    graph = without(import_graph(ROOT), KNOWN_BACK_EDGES)
    assert circles(graph) == [], "import circles:\n" + describe(graph)


def test_each_known_back_edge_is_still_there():
    """An entry of KNOWN_BACK_EDGES whose arrow is gone is removed, so no new circle can use it."""
    graph = import_graph(ROOT)
    assert [edge for edge in KNOWN_BACK_EDGES if edge[1] not in graph[edge[0]]] == []


def test_rule_modules_are_imported_only_by_the_registry():
    """The registry loads the rule modules by name (importlib); no other module imports one,
    so a rule can be added or removed without touching dplint. The rules package itself is
    named by the registry (to list it) and the cache (to fingerprint the rules' source)."""
    graph = import_graph(ROOT)
    importers = {
        (module, target): lines
        for module, targets in graph.items()
        if not module.startswith(RULES_PACKAGE + ".")
        for target, lines in targets.items()
        if target.startswith(RULES_PACKAGE + ".") or (target == RULES_PACKAGE and module not in ("dplint.registry", "dplint.cache"))
    }
    assert importers == {}


def test_no_subpackage_module_imports_torch():
    """The static path never imports torch. tests/test_security.py checks every import and call
    of dplint/*.py and rules/*.py; this covers the subpackages under dplint/ it does not glob
    (dplint/migration/). runtime_check/ runs scripts under torch on purpose."""
    modules = {m: p for m, p in module_files(ROOT).items() if p.parent != ROOT / "dplint" and p.is_relative_to(ROOT / "dplint")}
    assert modules, "no subpackage found: the check would check nothing"
    found = [
        f"{path.relative_to(ROOT)}:{line}: {name}"
        for module, path in modules.items()
        for name, line in imported_names(module, path, {})
        if name == "torch" or name.startswith("torch.")
    ]
    assert found == []


def test_config_knows_the_reporters_names():
    """config validates `output-format` against its own list of names (it imports no reporter);
    the list must be exactly the reporters', in the order the error message gives them."""
    from dplint.config import OUTPUT_FORMATS
    from dplint.reporters import REPORTERS

    assert OUTPUT_FORMATS == tuple(REPORTERS)


def test_an_output_format_that_is_not_a_name_is_a_config_error(tmp_path):
    """`output-format = ["json"]` is refused like any unknown name (it was an internal error:
    a list cannot be looked up among the reporters' names)."""
    import pytest

    from dplint.config import ConfigError, load_settings

    (tmp_path / "dplint.toml").write_text('output-format = ["json"]\n')
    with pytest.raises(ConfigError, match=r"`output-format` must be one of text, concise, .*, not \['json'\]"):
        load_settings(str(tmp_path))


# ------------------------------------------------------------------------- the guard's controls
def write_package(root: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


def test_the_guard_sees_lazy_relative_and_type_checking_imports(tmp_path):
    """The control: circles closed by a lazy import, a relative import and a TYPE_CHECKING
    import are all found, with the line of each arrow."""
    write_package(tmp_path, {
        "dplint/__init__.py": "",
        "dplint/a.py": "def f():\n    from dplint.b import g\n",
        "dplint/b.py": "from . import c\n",
        "dplint/c.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import dplint.a\n",
        "dplint/d.py": "from dplint import a\n",
        "rules/__init__.py": "",
        "runtime_check/__init__.py": "",
    })
    graph = import_graph(tmp_path)
    assert circles(graph) == [["dplint.a", "dplint.b", "dplint.c"]]
    assert one_circle(graph, ["dplint.a", "dplint.b", "dplint.c"]) == (
        "dplint.a -> dplint.b (dplint/a.py:2) -> dplint.c (dplint/b.py:1) -> dplint.a (dplint/c.py:3)"
    )
    assert circles(without(graph, {("dplint.c", "dplint.a")})) == []
