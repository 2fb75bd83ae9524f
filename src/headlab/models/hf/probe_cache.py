"""What the probe finds in a loaded checkpoint, kept in headlab's cache: probed once per model
code and shape, not at every load.

``probe`` (probe.py) runs one observed forward to find each attention module, its sizes, its
projections and its norm. For a model that transformers built from a checkpoint, what it finds
depends on the code that runs (transformers' class for the config) and the model's shapes, not
on the weights' values (but see below), so ``probed_layers`` keeps it as JSON, one small file per

    key = SHA-256 of (FORMAT, the source of the code that probes (probe.py, observe.py,
          layer.py), transformers' and torch's versions, the model's class, its config without
          the folder's name, every module's name and class, every parameter's name, shape and
          dtype)

in ``<headlab's cache>/probes/<key>.json`` (``gguf_cache.cache_root``: ``$HEADLAB_CACHE`` or the
platform's cache folder; a few kB per model, written atomically: a temporary file renamed into
place). Reading one back checks it against the model (every path exists and holds a module of the
recorded class, every projection's rows fit its weight and make the heads' widths, every norm has
a 1-D weight); an entry that fails any of these, or cannot be read, is probed again and
rewritten. A finding that only these weights' values decide (two heads matched to one slice,
as zero or copied weights make them) is not kept; a cache that cannot be written costs only the
probe at each load. Only classes of transformers itself are kept (a checkpoint's own code,
``trust_remote_code``, is probed each time: its source is not in the key), and ``attach`` (a
model in memory, which its owner may have changed in ways no key sees) always probes.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import os
import tempfile
from pathlib import Path

from torch import nn

from headlab.models.hf.layer import HFAttentionLayer, Norm, Projection
from headlab.models.hf.probe import probe

FORMAT = 1  # bump it when how an entry is written changes (a change of the probe's code is keyed)
#: The modules whose code decides what the probe finds: their source is part of every key, so an
#: entry written by an older probe is never read back by a newer one.
PROBE_CODE = ("probe.py", "observe.py", "layer.py")
FOLDER = "probes"
#: Config entries that name where the checkpoint was read, not what it is.
WHERE = ("_name_or_path", "_commit_hash")


def probe_key(model: nn.Module) -> str | None:
    """The cache key of ``model`` (see the module docstring); None for a class that is not
    transformers' own."""
    import torch
    import transformers

    cls = type(model)
    if not cls.__module__.startswith("transformers."):
        return None
    config = {k: v for k, v in model.config.to_dict().items() if k not in WHERE}
    facts = {
        "format": FORMAT,
        "probe_code": _probe_code(),
        "versions": [transformers.__version__, torch.__version__],
        "class": f"{cls.__module__}.{cls.__qualname__}",
        "config": config,
        "modules": [[name, type(m).__qualname__] for name, m in model.named_modules()],
        "parameters": [[name, list(p.shape), str(p.dtype)] for name, p in model.named_parameters()],
    }
    text = json.dumps(facts, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()


@functools.cache
def _probe_code() -> str:
    """SHA-256 of the probing modules' source (PROBE_CODE)."""
    digest = hashlib.sha256()
    for name in PROBE_CODE:
        digest.update((Path(__file__).parent / name).read_bytes())
    return digest.hexdigest()


def _runs(rows: tuple[int, ...]) -> list[list[int]]:
    """``rows`` as [start, stop) runs of consecutive rows (an output projection's 576 rows: one)."""
    runs: list[list[int]] = []
    for row in rows:
        if runs and runs[-1][1] == row:
            runs[-1][1] += 1
        else:
            runs.append([row, row + 1])
    return runs


def _projection_entry(found: Projection | str | None) -> dict | str | None:
    if found is None or isinstance(found, str):
        return found
    return {"path": found.path, "transposed": found.transposed, "rows": _runs(found.rows)}


def to_entry(layers: list[HFAttentionLayer]) -> list[dict]:
    """The layers as JSON-ready dicts: paths, sizes and rows, no modules."""
    return [
        {
            "path": layer.path,
            "class": type(layer.module).__qualname__,
            "num_heads": layer.num_heads,
            "num_kv_heads": layer.num_kv_heads,
            "head_dim": layer.head_dim,
            "embed_dim": layer.embed_dim,
            **{
                name: _projection_entry(getattr(layer, name))
                for name in ("output", "query", "key", "value")
            },
            "input_norm": None if layer.input_norm is None else layer.input_norm.path,
        }
        for layer in layers
    ]


class Mismatch(ValueError):
    """A cached entry that does not fit the model it was read for."""


def _module(model: nn.Module, path: str) -> nn.Module:
    try:
        return model.get_submodule(path)
    except AttributeError:
        raise Mismatch(f"no module {path!r}") from None


def _projection(
    model: nn.Module, entry, heads: int, d: int | None, columns: bool = False
) -> Projection | str | None:
    """The Projection an entry names, checked: a 2-D weight whose (out, in) view holds the rows
    (``columns``: the output projection's rows are its columns, the heads' outputs it reads),
    ``heads * d`` of them (a multiple of ``heads`` where ``d`` is None: the values' width may
    differ from the queries')."""
    if entry is None or isinstance(entry, str):
        return entry
    module = _module(model, entry["path"])
    weight = getattr(module, "weight", None)
    if weight is None or weight.dim() != 2:
        raise Mismatch(f"{entry['path']} has no 2-D weight")
    rows = tuple(r for start, stop in entry["rows"] for r in range(start, stop))
    out = weight.shape[int(bool(entry["transposed"]) != columns)]
    width = len(rows) if d is None else heads * d
    if len(rows) != width or len(rows) % heads or not rows or min(rows) < 0 or max(rows) >= out:
        raise Mismatch(f"{entry['path']}: rows do not fit its weight")
    return Projection(entry["path"], module, bool(entry["transposed"]), rows)


def from_entry(model: nn.Module, entries: list[dict], family: str) -> list[HFAttentionLayer]:
    """The layers an entry describes, on ``model``'s modules. Raises Mismatch (or KeyError,
    TypeError for a malformed entry) where it does not fit the model."""
    layers = []
    for e in entries:
        module = _module(model, e["path"])
        if type(module).__qualname__ != e["class"]:
            raise Mismatch(f"{e['path']} is a {type(module).__qualname__}, not {e['class']}")
        heads, kv_heads, d = int(e["num_heads"]), int(e["num_kv_heads"]), int(e["head_dim"])
        output = _projection(model, e["output"], heads, None, columns=True)
        if output is not None and output.weight().shape[0] != e["embed_dim"]:
            raise Mismatch(f"{e['path']}: its output projection is not {e['embed_dim']} wide")
        norm = None
        if e["input_norm"] is not None:
            norm_module = _module(model, e["input_norm"])
            weight = getattr(norm_module, "weight", None)
            if weight is None or weight.dim() != 1:
                raise Mismatch(f"{e['input_norm']} has no 1-D weight")
            norm = Norm(e["input_norm"], norm_module)
        layers.append(
            HFAttentionLayer(
                module=module,
                path=e["path"],
                family=family,
                num_heads=heads,
                num_kv_heads=kv_heads,
                head_dim=d,
                embed_dim=int(e["embed_dim"]),
                output=output,
                query=_projection(model, e["query"], heads, d),
                key=_projection(model, e["key"], kv_heads, d),
                value=_projection(model, e["value"], kv_heads, None),
                input_norm=norm,
            )
        )
    if not layers:
        raise Mismatch("no layers")
    return layers


def _read(path: Path, model: nn.Module, family: str) -> list[HFAttentionLayer] | None:
    try:
        document = json.loads(path.read_text(encoding="utf-8"))
        if document.get("format") != FORMAT:
            return None
        return from_entry(model, document["layers"], family)
    except (
        OSError,
        UnicodeDecodeError,
        ValueError,
        KeyError,
        TypeError,
        AttributeError,
        ArithmeticError,
    ):
        return None


def _write(path: Path, layers: list[HFAttentionLayer]) -> None:
    """``path`` written atomically (a temporary file beside it, renamed); nothing when the
    cache cannot be written."""
    text = json.dumps({"format": FORMAT, "layers": to_entry(layers)}, separators=(",", ":"))
    temporary = None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        handle, temporary = tempfile.mkstemp(prefix=f".tmp-{path.stem[:16]}-", dir=path.parent)
        with os.fdopen(handle, "w", encoding="utf-8") as f:
            f.write(text)
        os.replace(temporary, path)
    except OSError:
        if temporary is not None:
            with contextlib.suppress(OSError):
                os.unlink(temporary)


def probed_layers(
    model: nn.Module, family: str, root: Path | None = None
) -> list[HFAttentionLayer]:
    """``probe(model, family)``, read from the cache when this model's code and shapes were
    probed before (see the module docstring); ``root``: the cache folder (default
    ``gguf_cache.cache_root()``). Raises what ``probe`` raises."""
    from headlab.models.gguf_cache import cache_root

    key = probe_key(model)
    if key is None:
        return probe(model, family)
    path = (cache_root() if root is None else Path(root)) / FOLDER / f"{key}.json"
    layers = _read(path, model, family)
    if layers is None:
        layers = probe(model, family)
        if distinct(layers):
            _write(path, layers)
    return layers


def distinct(layers: list[HFAttentionLayer]) -> bool:
    """Whether every head's W_Q, W_K and W_V rows were found apart from every other head's: what
    the code and shapes decide. Weights that make two heads' queries equal (zeros, copies) let
    the probe match both to one slice; such a finding holds for these values only and is never
    kept."""
    for layer in layers:
        for found in (layer.query, layer.key, layer.value):
            if isinstance(found, Projection) and len(set(found.rows)) != len(found.rows):
                return False
    return True
