"""The layers, read from the import graph (``ast`` over src/headlab), not from tokens.

Data flows one way: reference -> attention -> models -> the analyses (analysis, heads, circuits,
experiments) -> results -> report and CLI. A module may import its own layer and the layers
before it, never a later one, and the layers form no cycle.

The results layer holds plain data: every result type and the one store (with the bounded
reader of every input file, ``results.input_files``, the interrupt handling behind its atomic
writes, ``results.interrupts``, and the defaults the CLI's help shows, ``results.defaults``). It
sits after the analyses in the flow (it holds what they measure) but imports none of them: it
imports only itself and the two modules at the package's root, and no torch. So every layer may
import it, and the analyses return its types.

The root holds only what every layer uses and no layer owns: ``limits`` (the size and range
checks every entry point makes) and ``notices`` (the base class of headlab's warnings). They
import nothing from headlab; ``test_the_root_holds_only_what_belongs_to_no_layer`` keeps it so.

The report renders results files: nothing it imports, however indirectly, imports torch. The
graph's answer is checked against Python's own: importing every report module in a fresh
interpreter leaves torch out of ``sys.modules``.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from functools import cache
from pathlib import Path

import headlab

SRC = Path(headlab.__file__).parent
# The layers in the order data flows; a module may import its own layer and earlier ones.
ORDER = ("root", "results", "reference", "attention", "models", "analyses", "top")
LAYER = {
    "reference": "reference",
    "attention": "attention",
    "models": "models",
    "analysis": "analyses",
    "heads": "analyses",
    "circuits": "analyses",
    "experiments": "analyses",
    "results": "results",
    "report": "top",
    "cli": "top",
    "__main__": "top",
}
HEAVY = ("torch", "transformers", "safetensors")


def module_name(path: Path) -> str:
    parts = path.relative_to(SRC.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {module_name(p): p for p in SRC.rglob("*.py")}


def layer(module: str) -> str:
    if module == "headlab":  # the public names (``headlab.compare``...), imported on first use
        return "top"
    at_root = module.count(".") == 1 and MODULES[module].name != "__init__.py"
    if at_root and module != "headlab.__main__":
        return "root"  # limits, notices: used by every layer, owned by none
    return LAYER[module.split(".")[1]]


def _type_checking(node: ast.AST) -> bool:
    return isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)


@cache
def imports(module: str, *, executed: bool = False) -> frozenset[str]:
    """Every module ``module`` imports (top level or inside a function); headlab modules by their
    full name, others by their top package. ``executed``: leave out ``if TYPE_CHECKING`` blocks,
    which never run."""
    tree = ast.parse(MODULES[module].read_text(encoding="utf-8"))
    found: set[str] = set()
    stack: list[ast.AST] = [tree]
    while stack:
        node = stack.pop()
        if executed and _type_checking(node):
            stack.extend(node.orelse)  # type: ignore[attr-defined]
            continue
        stack.extend(ast.iter_child_nodes(node))
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            assert node.level == 0, f"{module}: a relative import"
            base = node.module or ""
            for alias in node.names:
                sub = f"{base}.{alias.name}"
                found.add(sub if sub in MODULES else base)
    out = set()
    for name in found:
        if name.split(".")[0] != "headlab":
            out.add(name.split(".")[0])
            continue
        while name not in MODULES:  # a name inside a module: the module itself
            name = name.rpartition(".")[0]
        out.add(name)
    return frozenset(out)


def loaded_with(module: str) -> set[str]:
    """What importing ``module`` runs: its imports, their packages' __init__, transitively."""
    seen, todo = set(), [module]
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        if name in MODULES:
            parts = name.split(".")
            todo.extend(".".join(parts[:i]) for i in range(1, len(parts)))
            todo.extend(imports(name, executed=True))
    return seen


def test_no_module_imports_a_later_layer() -> None:
    wrong = []
    for module in MODULES:
        rank = ORDER.index(layer(module))
        for target in imports(module):
            if target in MODULES and ORDER.index(layer(target)) > rank:
                wrong.append(f"{module} ({layer(module)}) imports {target} ({layer(target)})")
    assert wrong == []


def test_the_layers_form_no_cycle() -> None:
    edges = {
        (layer(m), layer(t))
        for m in MODULES
        for t in imports(m)
        if t in MODULES and layer(t) != layer(m)
    }
    graph = {name: {b for a, b in edges if a == name} for name in ORDER}

    def cycle_from(start: str, path: tuple[str, ...]) -> tuple[str, ...] | None:
        for nxt in graph[start]:
            if nxt in path:
                return (*path, nxt)
            found = cycle_from(nxt, (*path, nxt))
            if found:
                return found
        return None

    assert [cycle_from(name, (name,)) for name in ORDER] == [None] * len(ORDER)


def test_results_and_report_load_no_torch_by_the_graph() -> None:
    for module in MODULES:
        if layer(module) == "results" or module.startswith("headlab.report"):
            heavy = sorted(set(HEAVY) & loaded_with(module))
            assert heavy == [], f"{module} loads {heavy}"


def test_results_and_report_load_no_torch_in_python() -> None:
    names = [m for m in MODULES if layer(m) == "results" or m.startswith("headlab.report")]
    probe = (
        "import importlib, sys\n"
        f"for name in {names!r}: importlib.import_module(name)\n"
        f"print(sorted(set({HEAVY!r}) & set(sys.modules)))\n"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                          check=True, timeout=120)  # fmt: skip
    assert done.stdout.strip() == "[]"


def test_the_graph_sees_a_lazy_import_and_a_package_init() -> None:
    """The reader is not blind: a function-level import counts, and importing a submodule runs
    its package's __init__ (the analyses' packages import torch there)."""
    assert "headlab.models" in imports("headlab.heads.model_text_attention") or any(
        t.startswith("headlab.models") for t in imports("headlab.analysis.report_measuring")
    )
    assert "torch" in loaded_with("headlab.heads.statistics")
    assert "headlab.analysis" in loaded_with("headlab.analysis.report_measuring")


ROOT = {"headlab.limits", "headlab.notices"}


def test_the_root_holds_only_what_belongs_to_no_layer() -> None:
    """Every other module sits in the layer it serves; the root imports nothing from headlab."""
    at_root = {m for m in MODULES if layer(m) == "root"}
    assert at_root == ROOT
    assert {t for m in ROOT for t in imports(m) if t.startswith("headlab")} == set()
