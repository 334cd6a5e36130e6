"""The house rules of hbmsim/'s layout, checked on the source (DESIGN.md, "Packages").

- no import circle between hbmsim's modules (counting imports inside functions too: a circle
  closed by a deferred import is still a circle);
- packages import only downward, in the layer order below;
- an import inside a function defers a heavy or optional dependency and says which
  (`# deferred: ...` on its line or the line above);
- no private name (`_name`) is imported from another module;
- no module of the product is longer than MAX_MODULE_LINES, but those allowed below, each with
  the reason; no function of hbmsim/ longer than MAX_FUNCTION_LINES.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "hbmsim"

# Lowest first. A module may import from its own layer and the layers below it. Top-level
# modules are layers of their own: errors and fmt under everything, result above the program
# language, api above the engine (it assembles counts and timing for the layers above).
LAYERS = [
    ("errors", "fmt"),
    ("files",),
    ("problem",),
    ("gpu",),
    ("program",),
    ("result",),
    ("algorithms",),
    ("libraries",),
    ("interpret",),
    ("engine",),
    ("api",),
    ("validation",),
    ("explore",),
    ("figures",),
    ("cli",),
]
LAYER_OF = {name: rank for rank, names in enumerate(LAYERS) for name in names}

MAX_MODULE_LINES = 600
MAX_FUNCTION_LINES = 80
# path -> why it may be longer
LONG_MODULES = {
    "kernels/validate.py": "the GPU run's driver: one script a device session copies and runs "
    "as a whole (calibration, timed sweep, ncu, the report), with no hbmsim engine there",
}


def _modules() -> dict[str, Path]:
    out = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = path.relative_to(ROOT).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        out[name] = path
    return out


MODULES = _modules()


def _is_package(name: str) -> bool:
    return MODULES[name].name == "__init__.py"


def _resolve(module: str, node: ast.ImportFrom) -> str | None:
    if node.level == 0:
        return node.module
    base = module.split(".")
    if not _is_package(module):
        base = base[:-1]
    base = base[: len(base) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def _imports(module: str):
    """(target module, names imported, node, inside a function) for each hbmsim import."""
    tree = ast.parse(MODULES[module].read_text())
    found = []

    def visit(node, in_function):
        for child in ast.iter_child_nodes(node):
            inner = in_function or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef))
            if isinstance(child, ast.ImportFrom):
                target = _resolve(module, child)
                for alias in child.names:
                    sub = f"{target}.{alias.name}"
                    if sub in MODULES:
                        found.append((sub, None, child, in_function))
                    elif target in MODULES:
                        found.append((target, alias.name, child, in_function))
            elif isinstance(child, ast.Import):
                for alias in child.names:
                    if alias.name in MODULES:
                        found.append((alias.name, None, child, in_function))
            visit(child, inner)

    visit(tree, False)
    return found


def _layer(module: str) -> int | None:
    parts = module.split(".")
    return LAYER_OF.get(parts[1]) if len(parts) > 1 else None


def test_no_import_circle():
    """Every module can be imported on its own before the modules that import it."""
    graph = {m: sorted({t for t, *_ in _imports(m) if t != m}) for m in MODULES}
    state: dict[str, int] = {}  # 1: on the path, 2: done
    path: list[str] = []

    def walk(m):
        state[m] = 1
        path.append(m)
        for t in graph[m]:
            if state.get(t) == 1:
                cycle = path[path.index(t) :] + [t]
                pytest.fail("import circle: " + " -> ".join(cycle))
            if t not in state:
                walk(t)
        path.pop()
        state[m] = 2

    for m in graph:
        if m not in state:
            walk(m)


def test_packages_import_only_downward():
    upward = []
    for m in MODULES:
        mine = _layer(m)
        if mine is None:  # hbmsim/__init__.py: the public surface re-exports from every layer
            continue
        for target, _name, node, _inner in _imports(m):
            theirs = _layer(target)
            if theirs is not None and theirs > mine:
                upward.append(f"{MODULES[m].relative_to(ROOT)}:{node.lineno} imports {target}")
    assert not upward, "imports against the layer order:\n" + "\n".join(upward)


def _says_deferred(lines: list[str], lineno: int) -> bool:
    """`# deferred:` on the import's line, or on the comment line above the block of imports
    (and their continuation lines) it starts."""
    i = lineno - 1
    if "# deferred:" in lines[i]:
        return True
    while i > 0:
        above = lines[i - 1].strip()
        if above.startswith("#"):
            return "# deferred:" in above
        if not (above.startswith(("from ", "import ", ")")) or above.endswith((",", "("))):
            return False
        i -= 1
    return False


def test_imports_inside_functions_say_what_they_defer():
    silent = []
    for path in MODULES.values():
        lines = path.read_text().splitlines()
        tree = ast.parse("\n".join(lines))
        for fn in ast.walk(tree):
            if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            for node in ast.walk(fn):
                if isinstance(node, (ast.Import, ast.ImportFrom)) and not _says_deferred(
                    lines, node.lineno
                ):
                    silent.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert not silent, "imports inside functions without '# deferred: why':\n" + "\n".join(
        sorted(set(silent))
    )


def test_no_private_name_imported_from_another_module():
    private = []
    for m in MODULES:
        for target, name, node, _inner in _imports(m):
            if name and name.startswith("_") and not name.startswith("__") and target != m:
                private.append(f"{MODULES[m].relative_to(ROOT)}:{node.lineno} {target}.{name}")
    assert not private, "private names imported across modules:\n" + "\n".join(private)


def _product_modules():
    for folder in ("hbmsim", "app_pages", "kernels"):
        yield from sorted((ROOT / folder).rglob("*.py"))
    yield ROOT / "app.py"


def test_modules_stay_short():
    long = []
    for path in _product_modules():
        rel = str(path.relative_to(ROOT))
        n = len(path.read_text().splitlines())
        if n > MAX_MODULE_LINES and rel not in LONG_MODULES:
            long.append(f"{rel}: {n} lines")
    assert not long, f"modules over {MAX_MODULE_LINES} lines:\n" + "\n".join(long)


def test_every_allowed_long_module_is_still_long():
    """An allowance outlives its reason once the module is short again."""
    for rel in LONG_MODULES:
        assert len((ROOT / rel).read_text().splitlines()) > MAX_MODULE_LINES, rel


def test_functions_stay_short():
    long = []
    for path in MODULES.values():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                n = node.end_lineno - node.lineno + 1
                if n > MAX_FUNCTION_LINES:
                    long.append(f"{path.relative_to(ROOT)}:{node.lineno} {node.name}: {n} lines")
    assert not long, f"functions over {MAX_FUNCTION_LINES} lines:\n" + "\n".join(long)
