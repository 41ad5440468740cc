"""The shape of the code base, as docs/ARCHITECTURE.md promises it: product modules of one job each
(at most ``MAX_MODULE_LINES`` lines), functions that fit on a screen (at most ``MAX_FUNCTION_LINES``,
except a measured hot path that says so with a ``# hot path:`` comment in the comment block above its
``def`` or on its first body lines), and no import cycle between the project's modules (imports inside functions
count: a lazy import hides a cycle, it does not remove it)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
PRODUCT_PACKAGES = ("pipeline", "procs", "ringbuf", "bench")
MAX_MODULE_LINES = 600
MAX_FUNCTION_LINES = 80
HOT_PATH_MARK = "# hot path:"


def product_modules(root: Path = REPO) -> dict[str, Path]:
    """Dotted module name -> file, for every .py file of the product packages."""
    out = {}
    for pkg in PRODUCT_PACKAGES:
        for path in sorted((root / pkg).rglob("*.py")):
            rel = path.relative_to(root).with_suffix("")
            parts = rel.parts[:-1] if rel.name == "__init__" else rel.parts
            out[".".join(parts)] = path
    return out


def long_functions(path: Path, limit: int = MAX_FUNCTION_LINES) -> list[str]:
    """``name (N lines)`` for each function of ``path`` longer than ``limit`` without the hot-path mark."""
    lines = path.read_text().splitlines()
    found = []
    for node in ast.walk(ast.parse("\n".join(lines))):
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        n = node.end_lineno - node.lineno + 1
        if n <= limit:
            continue
        first = node.decorator_list[0].lineno if node.decorator_list else node.lineno
        top = first - 1  # the comment block right above the def (or its decorators) counts
        while top > 0 and lines[top - 1].lstrip().startswith("#"):
            top -= 1
        around = lines[top:node.body[0].lineno + 1]  # ... and the def, up to its second body line
        if not any(HOT_PATH_MARK in line for line in around):
            found.append(f"{node.name} ({n} lines)")
    return found


def imports_of(name: str, path: Path, known: set[str]) -> set[str]:
    """The project modules that module ``name`` imports anywhere in its body (imports under
    ``if TYPE_CHECKING:`` do not run, so they do not count)."""
    is_pkg = path.name == "__init__.py"
    out = set()
    tree = ast.parse(path.read_text())
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            node.body = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                pkg = name.split(".") if is_pkg else name.split(".")[:-1]
                pkg = pkg[:len(pkg) - node.level + 1]
                base = ".".join(pkg + ([base] if base else []))
            targets = [base] + [f"{base}.{a.name}" for a in node.names]
        else:
            continue
        for t in targets:
            while t and t not in known:
                t = t.rpartition(".")[0]
            if t and t != name:
                out.add(t)
    return out


def import_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), each sorted."""
    index, low, stack, on, comps, counter = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                comps.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return comps


def test_no_product_module_is_over_the_line_limit():
    over = {name: n for name, path in product_modules().items()
            if (n := len(path.read_text().splitlines())) > MAX_MODULE_LINES}
    assert over == {}


def test_no_function_is_over_the_line_limit_unless_it_is_a_marked_hot_path():
    over = {name: found for name, path in product_modules().items() if (found := long_functions(path))}
    assert over == {}


def test_no_import_cycle_between_project_modules():
    mods = product_modules()
    graph = {name: imports_of(name, path, set(mods)) for name, path in mods.items()}
    # a package imports its submodules through __init__ re-exports; that edge is not a cycle of design
    for name in graph:
        graph[name] = {t for t in graph[name] if not (mods[name].name == "__init__.py" and t.startswith(name + "."))}
    assert import_cycles(graph) == []


# ------------------------------------------------------------------ the checks themselves, on known inputs

def test_long_function_check_sees_a_long_function_and_honours_the_mark(tmp_path):
    body = "\n".join(f"    x{i} = {i}" for i in range(MAX_FUNCTION_LINES))
    plain = tmp_path / "plain.py"
    plain.write_text(f"def f():\n{body}\n")
    marked = tmp_path / "marked.py"
    marked.write_text(f"def f():\n    {HOT_PATH_MARK} one loop on purpose\n{body}\n")
    above = tmp_path / "above.py"
    above.write_text(f"x = 1\n{HOT_PATH_MARK} why\n# more of why\ndef f():\n{body}\n")
    apart = tmp_path / "apart.py"  # a mark that belongs to something else does not count
    apart.write_text(f"{HOT_PATH_MARK} why\nx = 1\ndef f():\n{body}\n")
    assert long_functions(plain) == [f"f ({MAX_FUNCTION_LINES + 1} lines)"]
    assert long_functions(marked) == []
    assert long_functions(above) == []
    assert long_functions(apart) == [f"f ({MAX_FUNCTION_LINES + 1} lines)"]


@pytest.mark.parametrize("edges, cycles", [
    ({"a": {"b"}, "b": {"c"}, "c": set()}, []),
    ({"a": {"b"}, "b": {"c"}, "c": {"a"}}, [["a", "b", "c"]]),
    ({"a": {"b"}, "b": {"a"}, "c": {"c"}}, [["a", "b"]]),
])
def test_cycle_check_finds_cycles(edges, cycles):
    assert import_cycles(edges) == cycles


def test_imports_of_resolves_relative_and_lazy_imports(tmp_path):
    pkg = tmp_path / "bench"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from . import b\n\ndef f():\n    from bench.c import g\n")
    (pkg / "d.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from bench.a import f\n")
    known = {"bench", "bench.a", "bench.b", "bench.c", "bench.d"}
    assert imports_of("bench.a", pkg / "a.py", known) == {"bench", "bench.b", "bench.c"}
    assert imports_of("bench.d", pkg / "d.py", known) == set()
