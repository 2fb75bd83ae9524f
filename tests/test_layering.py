"""The layers, read from the import graph (``ast`` over src/headlab), not from tokens.

Data flows one way: reference -> attention -> models -> the analyses (analysis, heads, circuits,
experiments) -> results -> report and CLI. A module may import its own layer and the layers
before it, never a later one, and the layers form no cycle; nor do the modules themselves, at
any level (``test_no_import_circle_at_any_level``: inside a folder too).

The results layer holds plain data: every result type and the one store (with the bounded
reader of every input file, ``results.input_files``, the interrupt handling behind its atomic
writes, ``results.interrupts``, and the defaults the CLI's help shows, ``results.defaults``). It
sits after the analyses in the flow (it holds what they measure) but imports none of them: it
imports only itself and the two modules at the package's root, and no torch. So every layer may
import it, and the analyses return its types.

The root holds only what every layer uses and no layer owns: ``limits`` (the size and range
checks every entry point makes) and ``notices`` (the base class of headlab's warnings). They
import nothing from headlab; ``test_the_root_holds_only_what_belongs_to_no_layer`` keeps it so.

What the analyses return is read from their annotations: a dataclass a public function or method
of the analysis layers returns is defined in ``headlab.results``, or is named in ``MEASUREMENTS``
(tensors included; its ``result()`` is the results type) or ``INTERMEDIATES`` (inputs, plans and
pieces one analysis hands another) with why. No dataclass outside results serialises itself but
the typed requests whose ``to_dict`` a result records.

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


def import_circles(graph: dict[str, list[str]] | None = None) -> list[list[str]]:
    """The modules that import each other in a circle, however indirectly (strongly connected
    components of more than one module, Tarjan's algorithm), counting every import: top level,
    inside functions and under ``if TYPE_CHECKING``; or the circles of ``graph``."""
    if graph is None:
        graph = {m: sorted(t for t in imports(m) if t in MODULES and t != m) for m in MODULES}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    circles: list[list[str]] = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(graph[root]))]  # depth first without recursion
        index[root] = low[root] = len(index)
        stack.append(root)
        while work:
            node, targets = work[-1]
            nxt = next(targets, None)
            if nxt is not None:
                if nxt not in index:
                    index[nxt] = low[nxt] = len(index)
                    stack.append(nxt)
                    work.append((nxt, iter(graph[nxt])))
                elif nxt in stack:
                    low[node] = min(low[node], index[nxt])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    circles.append(sorted(component))
    return circles


def entry_graph() -> dict[str, list[str]]:
    """The entries of each folder (its modules and its subfolders) as nodes: a -> b where a
    module in entry a imports one in entry b, a and b in one folder (a package's ``__init__`` is
    its folder, not an entry of it)."""
    graph: dict[str, set[str]] = {}
    for module in MODULES:
        for target in imports(module):
            if target not in MODULES or target == module:
                continue
            a, b = module.split("."), target.split(".")
            common = 0
            while common < min(len(a), len(b)) and a[common] == b[common]:
                common += 1
            if common in (len(a), len(b)):  # one is the other's package
                continue
            source = ".".join(a[: common + 1])
            graph.setdefault(source, set()).add(".".join(b[: common + 1]))
            graph.setdefault(".".join(b[: common + 1]), set())
    return {node: sorted(targets) for node, targets in graph.items()}


def test_no_import_circle_at_any_level() -> None:
    """Between any modules, inside one folder too: each module's imports lead away from it;
    and between the entries of a folder (models/hf and models/gguf_cache.py may not import
    each other, even through different modules)."""
    assert import_circles() == []
    assert import_circles(entry_graph()) == []


def test_the_circle_finder_finds_a_circle(monkeypatch) -> None:
    fake = {
        "headlab.a": {"headlab.b"},
        "headlab.b": {"headlab.c"},
        "headlab.c": {"headlab.a"},
        "headlab.d": {"headlab.a"},
    }
    monkeypatch.setattr(sys.modules[__name__], "MODULES", dict.fromkeys(fake, None))
    monkeypatch.setattr(sys.modules[__name__], "imports", lambda m: fake[m])
    assert import_circles() == [["headlab.a", "headlab.b", "headlab.c"]]


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
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=120
    )
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


# What the analyses return. A public function or method of the analysis layers that returns a
# dataclass returns one of ``headlab.results`` (plain data with ``to_dict``/``from_dict``, no
# torch), or one named here with why it is not a result. A new one fails until it is decided.
MEASUREMENTS = {  # the measurement, tensors included; its ``result()`` is the results type
    "Comparison": "compare's outputs, weights and finding rows; result(): ComparisonResult",
}
INTERMEDIATES = {  # inputs, plans and pieces one analysis hands another; never printed as such
    "KeySpec": "which keys a score split explains, parsed from the CLI's --keys before loading",
    "ImageKeys": "the --keys of a score split on an image, parsed before loading, resolved to a "
    "KeySpec on its patch grid",
    "PairsOverQueries": "one head's pair matrix summed over a long text's queries, tensors "
    "(read by benchmarks; no command prints it yet)",
    "QKMap": "one layer's held map from the stream to q and k, tensors",
    "Finding": "one finding with its (batch, q_pos) rows; row(): FindingRow",
    "SideFacts": "what the findings read of one side's trace, tensors",
    "HeadSums": "one layer's streamed sums, tensors, reduced into HeadStatistics",
    "TextPass": "one streaming pass's sums, tensors",
    "TokenBatch": "a tokenized input (models' interface)",
    "Evaluation": "one held-out run of kv_budget, read into its KVBudget rows",
    "CopyTask": "an input text with a known repeat",
    "Reference": "the unpruned model's outputs, tensors, that quality is measured against",
    "Batch": "a toy task's tokens and labels, tensors",
    "TaskSpec": "a toy task's shapes",
    "SweepPlan": "what a sweep will run (configs, the output file)",
    "ModelSource": "what a corpus worker loads (a request)",
    "Document": "one input text of a corpus",
    "DocumentResult": "a corpus worker's event (job, pid, seconds); its stored part, row(), "
    "holds DocumentSums",
    "CorpusPlan": "what a corpus run will do (jobs, the output file)",
    "Metric": "what a circuit metric reads, tensors",
    "LayerWeights": "one layer's per-head matrices, tensors",
    "TaskPairs": "clean and corrupted token ids, tensors",
    "PairRow": "one line of a task's pairs file, as read",
    "Prepared": "a checked circuit request with its pairs and graph",
    "Graph": "the nodes and edges of a model's circuit graph",
    "StreamGraph": "the nodes and edges of an encoder-decoder's circuit graph (two streams)",
    "StreamNode": "a node of an encoder-decoder's circuit graph",
    "StreamInputs": "an encoder-decoder's clean and corrupted inputs and metric, tensors",
    "Node": "a node of the circuit graph",
    "Edge": "an edge of the circuit graph",
    "LayerShape": "a layer's head counts and widths",
    "Block": "a model's block modules (nn.Module)",
    "Cache": "one full run's activations, tensors",
    "Moved": "the node an integrated-gradients run moves (an option of the run)",
    "SlicedReceivers": "one layer's receivers' W rows and norm, tensors (edge attribution)",
    "GradientRun": "one forward and backward's kept gradients, tensors (edge attribution)",
}
ANALYSES = ("analyses",)


def dataclasses_defined() -> dict[str, set[str]]:
    """Dataclass name -> the modules that define one of that name."""
    found: dict[str, set[str]] = {}
    for module, path in MODULES.items():
        for node in ast.parse(path.read_text(encoding="utf-8")).body:
            if isinstance(node, ast.ClassDef) and any(
                "dataclass" in ast.unparse(d) for d in node.decorator_list
            ):
                found.setdefault(node.name, set()).add(module)
    return found


def where_named(module: str) -> dict[str, str]:
    """Name -> the module it comes from, for the names ``module`` defines or imports by name
    (``from headlab.x import Name``, at any depth, ``TYPE_CHECKING`` blocks included)."""
    tree = ast.parse(MODULES[module].read_text(encoding="utf-8"))
    names = {
        node.name: module for node in tree.body if isinstance(node, (ast.ClassDef, ast.FunctionDef))
    }
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("headlab"):
            for alias in node.names:
                names[alias.asname or alias.name] = node.module
    return names


def public_returns(module: str):
    """(qualified name, names in its return annotation) of every public function and public
    method of a public class at the top of ``module``."""
    tree = ast.parse(MODULES[module].read_text(encoding="utf-8"))
    for node in tree.body:
        functions = [(node.name, node)] if isinstance(node, ast.FunctionDef) else []
        if isinstance(node, ast.ClassDef) and not node.name.startswith("_"):
            functions = [
                (f"{node.name}.{f.name}", f) for f in node.body if isinstance(f, ast.FunctionDef)
            ]
        for name, function in functions:
            if name.split(".")[-1].startswith("_") or function.returns is None:
                continue
            returned = function.returns
            if isinstance(returned, ast.Constant) and isinstance(returned.value, str):
                returned = ast.parse(returned.value, mode="eval").body
            yield name, {n.id for n in ast.walk(returned) if isinstance(n, ast.Name)}


def analysis_returns() -> list[tuple[str, str, str]]:
    """(function, dataclass, its module) for every dataclass a public analysis returns."""
    defined = dataclasses_defined()
    out = []
    for module in MODULES:
        if layer(module) not in ANALYSES:
            continue
        named = where_named(module)
        for function, names in public_returns(module):
            for name in sorted(names & set(defined)):
                source = named.get(name)  # a package's re-export: the one module defining it
                home = source if source in defined[name] else min(defined[name])
                out.append((f"{module}.{function}", name, home))
    return out


def test_public_analyses_return_result_types() -> None:
    """Every dataclass a public analysis function returns is defined in ``headlab.results``,
    or is a measurement whose ``result()`` is, or an intermediate named above with its reason."""
    known = set(MEASUREMENTS) | set(INTERMEDIATES)
    wrong = [
        f"{function} returns {name} ({home}): move it to headlab.results, or say why not"
        for function, name, home in analysis_returns()
        if layer(home) != "results" and name not in known
    ]
    assert wrong == []


def test_the_lists_above_are_still_true() -> None:
    """A name listed as not a result is still returned by an analysis and still lives outside
    results (a type that moved to results, or is no longer returned, leaves the lists)."""
    returns = analysis_returns()
    assert ("headlab.analysis.compare.compare", "Comparison", "headlab.analysis.compare") in returns
    grad = ("headlab.analysis.grad.coupling_comparison", "CouplingComparison")
    assert (*grad, "headlab.results.coupling_result") in returns  # the reader sees results too
    returned = {name: home for _, name, home in returns}
    listed = set(MEASUREMENTS) | set(INTERMEDIATES)
    assert sorted(listed - set(returned)) == []
    assert sorted(n for n in listed if layer(returned[n]) == "results") == []


def test_a_measurement_gives_its_result_as_a_results_type() -> None:
    """``Comparison.result()`` returns a results type."""
    defined = dataclasses_defined()
    for name in MEASUREMENTS:
        (module,) = defined[name]
        returns = dict(public_returns(module))
        (result,) = returns[f"{name}.result"]
        assert layer(where_named(module)[result]) == "results", f"{name}.result() -> {result}"


def test_only_results_and_requests_serialise() -> None:
    """A dataclass outside ``headlab.results`` with ``to_dict``/``from_dict`` is a typed request
    whose ``to_dict`` a result records as its set-up, not a result in the wrong place."""
    requests = {"CompareRequest", "TaskRequest"}
    serialising = set()
    for module, path in MODULES.items():
        if layer(module) == "results":
            continue
        for node in ast.parse(path.read_text(encoding="utf-8")).body:
            if isinstance(node, ast.ClassDef) and any(
                "dataclass" in ast.unparse(d) for d in node.decorator_list
            ):
                methods = {f.name for f in node.body if isinstance(f, ast.FunctionDef)}
                if methods & {"to_dict", "from_dict"}:
                    serialising.add(node.name)
    assert sorted(serialising - requests) == []
