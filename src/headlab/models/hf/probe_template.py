"""What the probe finds for one attention class in one role, as a template every layer of that
class and role follows.

A layer's role is where it sits, its place in each list left out
(``model.decoder.layers.*.encoder_attn``), so that an encoder-decoder whose encoder's, decoder's
and cross-attention share a class (BART's, Whisper's, T5's) keeps one template for each.

A template holds the first layer's findings with every path relative to the layer's own
(``[up, rest]``: up ``up`` levels from the attention module, then ``rest``): its sizes, the output
projection (layout, width), each head's first query, key and value row in the projection that
holds them (``probe.Claim``), and the norm in front. ``to_entry`` keeps a model's layers as one
template per class and role, only where every layer of a class and role gives the same template
(but the first, which may have one of its own, keyed by its exact path: BART's layer 0 reads the
embeddings' norm) and the layers are called in the order the model holds them (else nothing is
kept: such a model is probed at every load).

``checked_layers`` builds the layers back: the template's claims are checked on a forward that
stops after the first layer of each template (``probe.probe_first``: a probe of one layer per
template; an encoder-decoder's in two stopped forwards, its encoder's and its decoder's), that
layer must give the template again, and every other layer of it is that one
moved to its own path, each module found there and its weight shaped as the first layer's. The
model's code and shapes are in the cache key, so the same code over the same shapes finds the
same rows; the weights' values are what the check looks at. Whatever does not fit raises
``BadEntry`` saying why.
"""

from __future__ import annotations

from torch import nn

from headlab.models.hf.layer import HFAttentionLayer, Norm, Projection
from headlab.models.hf.probe import CLAIMED, Claim, claim_of, probe_first
from headlab.results.cache_files import BadEntry, expect, expect_int

MAX_HEADS = 2**16  # offsets per projection a template may name
MAX_ROWS = 2**40  # a row index or width a template may name (checked on the model later)
MAX_DEPTH = 64  # levels of a relative path


def _relative(path: str, base: str) -> list:
    """``path`` as [up, rest] from ``base``: up ``up`` levels, then ``rest``."""
    parts, base_parts = path.split("."), base.split(".")
    common = 0
    while common < min(len(parts), len(base_parts)) and parts[common] == base_parts[common]:
        common += 1
    return [len(base_parts) - common, ".".join(parts[common:])]


def _absolute(relative: list, base: str) -> str:
    up, rest = relative
    kept = base.split(".")[: max(0, len(base.split(".")) - up)]
    return ".".join([*kept, rest] if rest else kept)


def role(path: str) -> str:
    """Where a layer sits, its place in each list left out: ``model.encoder.layers.*.self_attn``."""
    return ".".join("*" if part.isdigit() else part for part in path.split("."))


def _key(path: str, module: nn.Module, keys=()) -> tuple[str, str]:
    """(class, role), or (class, the exact path) where ``keys`` hold a template of that layer
    alone."""
    exact = (type(module).__qualname__, path)
    return exact if exact in keys else (exact[0], role(path))


def template(layer: HFAttentionLayer, alone: bool = False) -> dict:
    """``layer``'s findings with every path relative to its own (JSON-ready); ``alone``: a
    template of this layer only (its role is its exact path)."""

    def claim(found, heads: int) -> dict | None:
        made = claim_of(found, heads)
        if made is None:
            return None
        relative = _relative(made.path, layer.path)
        return {"path": relative, "transposed": made.transposed, "offsets": list(made.offsets)}

    output, norm = layer.output, layer.input_norm
    out = None
    if output is not None:
        out = {
            "path": _relative(output.path, layer.path),
            "transposed": output.transposed,
            "width": len(output.rows),
        }
    return {
        "class": type(layer.module).__qualname__,
        "role": layer.path if alone else role(layer.path),
        "num_heads": layer.num_heads,
        "num_kv_heads": layer.num_kv_heads,
        "head_dim": layer.head_dim,
        "embed_dim": layer.embed_dim,
        "output": out,
        "query": claim(layer.query, layer.num_heads),
        "key": claim(layer.key, layer.num_kv_heads),
        "value": claim(layer.value, layer.num_kv_heads),
        "input_norm": None if norm is None else _relative(norm.path, layer.path),
    }


def to_entry(model: nn.Module, layers: list[HFAttentionLayer]) -> list[dict] | None:
    """One template per attention class and role (the first layer of a role may have one of its
    own: BART's layer 0 reads the embeddings' norm, the others none), or None where the layers
    do not follow them."""
    templates: dict[tuple[str, str], dict] = {}
    firsts: dict[tuple[str, str], list[HFAttentionLayer]] = {}
    apart: set[tuple[str, str]] = set()  # the roles whose first layer has its own template
    for layer in layers:
        made = template(layer)
        key = (made["class"], made["role"])
        if templates.setdefault(key, made) == made:
            firsts.setdefault(key, []).append(layer)
            continue
        if len(firsts[key]) != 1 or key in apart:
            return None  # a layer past the first differs
        apart.add(key)
        alone = template(firsts[key][0], alone=True)
        templates[(alone["class"], alone["role"])] = alone
        templates[key], firsts[key] = made, [layer]
    held = [name for name, m in model.named_modules() if _key(name, m, templates) in templates]
    return list(templates.values()) if held == [layer.path for layer in layers] else None


def _check_relative(value: object, what: str) -> list:
    if not isinstance(value, list) or len(value) != 2 or not isinstance(value[1], str):
        raise BadEntry(f"{what}: expected [levels up, path]")
    if len(value[1]) > 1000:
        raise BadEntry(f"{what}: a path of {len(value[1])} characters")
    return [expect_int(value[0], what, 0, MAX_DEPTH), value[1]]


def _check_claim(value: object, what: str) -> dict | None:
    if value is None:
        return None
    offsets = expect(value, "offsets", list)
    if not 1 <= len(offsets) <= MAX_HEADS:
        raise BadEntry(f"{what}: expected 1 to {MAX_HEADS} offsets, got {len(offsets)}")
    return {
        "path": _check_relative(expect(value, "path", list), what),
        "transposed": expect(value, "transposed", bool),
        "offsets": [expect_int(o, f"{what}'s offsets", 0, MAX_ROWS) for o in offsets],
    }


def check_templates(values: list) -> list[dict]:
    """``values`` (an entry's templates) checked by type and range; BadEntry otherwise."""
    if not 1 <= len(values) <= 64:
        raise BadEntry(f"expected 1 to 64 templates, got {len(values)}")
    checked = []
    for value in values:
        name = expect(value, "class", str)
        made = {"class": name[:200], "role": expect(value, "role", str)[:200]}
        for size in ("num_heads", "num_kv_heads", "head_dim", "embed_dim"):
            made[size] = expect_int(expect(value, size, int), f"{name}'s {size}", 1, MAX_ROWS)
        output = expect(value, "output", (dict, type(None)))
        made["output"] = None
        if output is not None:
            made["output"] = {
                "path": _check_relative(expect(output, "path", list), f"{name}'s output"),
                "transposed": expect(output, "transposed", bool),
                "width": expect_int(expect(output, "width", int), f"{name}'s output", 1, MAX_ROWS),
            }
        for part in CLAIMED:
            made[part] = _check_claim(expect(value, part, (dict, type(None))), f"{name}'s {part}")
        norm = expect(value, "input_norm", (list, type(None)))
        made["input_norm"] = None if norm is None else _check_relative(norm, f"{name}'s norm")
        checked.append(made)
    return checked


def checked_layers(
    model: nn.Module,
    family: str,
    templates: list[dict],
    inputs: dict | None = None,
    stages: list[tuple[nn.Module, dict]] | None = None,
    lengths: dict | None = None,
) -> list[HFAttentionLayer]:
    """The layers ``templates`` describe on ``model``, checked (module docstring) on a forward
    of ``inputs`` (its keywords; None: a few tokens); BadEntry saying why where they do not
    fit. ``stages``: (part, keywords) pairs, a template's first layer checked on the forward of
    the first whose ``part`` (a module of ``model``) holds it (an encoder-decoder: its encoder's
    on the source, its decoder's on given encoder states, so that neither runs past its first
    block). ``lengths``: filled with id(module) -> (q_pos, k_pos) of its template's first layer's
    call."""
    by_key = {(t["class"], t["role"]): t for t in templates}
    held = [(name, m) for name, m in model.named_modules() if _key(name, m, by_key) in by_key]
    firsts: dict[tuple[str, str], tuple[str, dict]] = {}
    for name, module in held:
        firsts.setdefault(_key(name, module, by_key), (name, by_key[_key(name, module, by_key)]))
    if len(firsts) != len(by_key):
        raise BadEntry("a template names a class the model does not hold")
    claims = {
        path: {
            part: None
            if t[part] is None
            else Claim(
                _absolute(t[part]["path"], path), t[part]["transposed"], tuple(t[part]["offsets"])
            )
            for part in CLAIMED
        }
        for path, t in firsts.values()
    }
    found, seen = {}, {}
    for part, keywords in stages or [(model, inputs)]:
        inside = {id(m) for m in part.modules()}
        here = {
            p: c
            for p, c in claims.items()
            if p not in found and id(model.get_submodule(p)) in inside
        }
        if here:
            got, refuted = probe_first(model, family, here, inputs=keywords, lengths=seen)
            if refuted:
                raise BadEntry(refuted)
            found.update(got)
    for path, t in firsts.values():
        if path not in found or template(found[path], alone=t["role"] == path) != t:
            raise BadEntry(f"{path} does not give the entry's template when probed")
    if lengths is not None:
        for name, module in held:
            first = found[firsts[_key(name, module, by_key)][0]].module
            lengths[id(module)] = seen[id(first)]
    return [
        _moved(model, found[firsts[_key(name, module, by_key)][0]], name, module)
        for name, module in held
    ]


def _moved(model: nn.Module, first: HFAttentionLayer, path: str, module: nn.Module):
    """``first`` moved to the attention module at ``path``: each module found at the same
    relative path and shaped as the first layer's (BadEntry otherwise)."""
    if module is first.module:
        return first

    def same(found, vector: bool = False):
        if found is None or isinstance(found, str):
            return found
        where = _absolute(_relative(found.path, first.path), path)
        try:
            moved = model.get_submodule(where)
        except AttributeError:
            raise BadEntry(f"no module {where!r}") from None
        weight = getattr(moved, "weight", None)
        if weight is None or tuple(weight.shape) != tuple(found.module.weight.shape):
            raise BadEntry(f"{where}: not shaped as {found.path}")
        if vector:
            return Norm(where, moved)
        return Projection(where, moved, found.transposed, found.rows)

    return HFAttentionLayer(
        module=module,
        path=path,
        family=first.family,
        num_heads=first.num_heads,
        num_kv_heads=first.num_kv_heads,
        head_dim=first.head_dim,
        embed_dim=first.embed_dim,
        output=same(first.output),
        query=same(first.query),
        key=same(first.key),
        value=same(first.value),
        input_norm=same(first.input_norm, vector=True),
    )
