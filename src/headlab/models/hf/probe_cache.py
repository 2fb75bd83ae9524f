"""What the probe's search finds in a loaded checkpoint, kept in headlab's cache: searched once
per model code and shape, checked at every load.

``probe`` (probe.py) runs one observed forward to find each attention module, its sizes, its
projections and its norm. For a model that transformers built from a checkpoint, what it finds
depends on the code that runs (transformers' class for the config) and the model's shapes, not
on the weights' values (but see below), so ``probed_layers`` keeps it as JSON, one small file per

    key = SHA-256 of (FORMAT, the source of the code that probes (probe.py, observe.py,
          layer.py, probe_template.py), transformers' and torch's versions, the model's class,
          its config without the folder's name, every module's name and class, every
          parameter's name, shape and dtype)

in ``<headlab's cache>/probes/<key>.json`` (``locations.cache_root``: ``$HEADLAB_CACHE`` or the
platform's cache folder; a few kB per model, written atomically: a temporary file renamed into
place).

An entry holds one template per attention class and role (probe_template.py: the first
layer's sizes, output projection, norm, and each head's first query, key and value row, every
path relative to the layer's own). It is an input like any other: read by the bounded, typed reader
(``cache_files.read_entry``; a wrong type, a huge number, a deep nesting fail there), then
checked on the model by a probe of one layer per template: a forward stopped after the first layer
of each checks the template's claims there (the module is inside the attention module, and
at each head's offset its output *is* that head's query, key or value, the heads' rows apart),
and that layer must give the template again; every other layer of the class is that layer moved
to its own path, its modules shaped as the first's. So an entry that passes gives what the
search gives wherever the weights tell the heads apart (permuted heads, two heads on one slice,
another module all fail); one that fails is discarded with one ``CacheNotice``, probed, and
written again. What is saved: the forward past the first layer, and the search.

A finding that only these weights' values decide (two heads matched to one slice, as zero or
copied weights make them) is not kept; a cache that cannot be written costs only the search.
Only classes of transformers itself are kept (a checkpoint's own code, ``trust_remote_code``,
is probed each time: its source is not in the key), and ``attach`` (a model in memory, which its
owner may have changed in ways no key sees) always probes.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
from pathlib import Path

from torch import nn

from headlab.models.hf.layer import HFAttentionLayer, Projection
from headlab.models.hf.probe import probe
from headlab.models.hf.probe_template import check_templates, checked_layers, to_entry
from headlab.results.cache_files import BadEntry, discarded, expect, read_entry, write_entry

FORMAT = 3  # bump it when how an entry is written changes (a change of the probe's code is keyed)
#: The modules whose code decides what the probe finds: their source is part of every key, so an
#: entry written by an older probe is never read back by a newer one.
PROBE_CODE = ("probe.py", "observe.py", "layer.py", "probe_template.py")
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


def read_templates(path: Path) -> list[dict]:
    """The templates of the entry at ``path`` (probe_template.py), read bounded and checked by
    type and range; FileNotFoundError, or BadEntry saying what is wrong."""
    document = read_entry(path)
    if expect(document, "format", int) != FORMAT:
        raise BadEntry(f"format {document['format']}, expected {FORMAT}")
    return check_templates(expect(document, "templates", list))


def probed_layers(
    model: nn.Module,
    family: str,
    root: Path | None = None,
    inputs: dict | None = None,
    stages: list[tuple[nn.Module, dict]] | None = None,
    lengths: dict | None = None,
) -> list[HFAttentionLayer]:
    """``probe(model, family, inputs=inputs)``, or, when this model's code and shapes were probed
    before, the layers of the cache's entry checked by a probe of one layer per template (see the
    module docstring); ``root``: the cache folder (default ``locations.cache_root()``);
    ``inputs``: the forward's keywords (an encoder-decoder's source and target, an image
    model's pixels; None: a few tokens), which the model's config decides, so the key holds
    them. ``stages``: where the check runs a forward of its own (``checked_layers``); ``lengths``:
    filled with id(module) -> (q_pos, k_pos) of each layer's call (``probe``). An entry that
    cannot be read or does not pass is discarded with one ``CacheNotice``, probed and written
    again. Raises what ``probe`` raises."""
    from headlab.results.locations import cache_root

    key = probe_key(model)
    if key is None:
        return probe(model, family, inputs=inputs, lengths=lengths)
    path = (cache_root() if root is None else Path(root)) / FOLDER / f"{key}.json"
    try:
        return checked_layers(model, family, read_templates(path), inputs, stages, lengths)
    except FileNotFoundError:
        pass
    except BadEntry as error:
        discarded("the probe cache entry", path, str(error))
    layers = probe(model, family, inputs=inputs, lengths=lengths)
    templates = to_entry(model, layers) if distinct(layers) else None
    if templates is not None:
        _write(path, {"format": FORMAT, "templates": templates})
    return layers


def _write(path: Path, entry: dict) -> None:
    """``entry`` written atomically; nothing when the cache cannot be written."""
    with contextlib.suppress(OSError):
        path.parent.mkdir(parents=True, exist_ok=True)
        write_entry(path, entry)


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
