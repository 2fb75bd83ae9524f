"""One short forward, observed, finds every attention module of a model and where its heads are.

No family is named: ``probe(model)`` runs a forward of three tokens with a recorder active, and

- the registered function (attention.py) reports each call: the module, in call order (the
  layers' order), and the shapes transformers passed (heads, K/V heads, head_dim), the queries
  and keys of position 0, and the tensor it returned;
- a forward hook on every module with a 2-D weight (``nn.Linear``, GPT-2's ``Conv1D``, ...)
  reports its input and output. The module whose input *is* the tensor a call returned (the same
  memory: the family only reshapes it) is that layer's output projection W_O, wherever it sits
  (``o_proj``, ``c_proj``, BERT's ``BertSelfOutput.dense`` in the parent module). Whether its
  weight is stored (out, in) or (in, out) is read from its output: y = x W^T + b or x W + b.
- At position 0 rotary positions are the identity, so where the queries are a linear map of the
  layer's input, each head's query of position 0 is a slice of the output of one projection
  inside the module: those rows of its weight are that head's W_Q (separate ``q_proj``, fused
  ``qkv_proj`` or ``c_attn``, GPT-NeoX's per-head interleaving alike). A norm between the
  projection and the attention (QK-norm) leaves no such slice: then there is no W_Q, and
  ``HFAttentionLayer.query_key_weights`` says why.

Claims (``probe_first``): where a cached entry (probe_cache.py) says each head's rows are, a
forward observed up to the first layer of each template checks it instead of searching:
the named module sits inside the attention module, its layout is the observed one, and at each
head's claimed offset its output *is* that head's query (key, value), the heads' rows apart. A
claim that holds gives what the search gives wherever the weights tell the heads apart; one that
does not is searched, and said.
"""

from __future__ import annotations

from contextvars import ContextVar
from dataclasses import dataclass, field

import torch
from torch import Tensor, nn

from headlab.models.hf.layer import HFAttentionLayer, Norm, Projection

#: The recorder of the probe running in this thread, if any (read by the registered function).
RECORDER: ContextVar[Recorder | None] = ContextVar("headlab_probe", default=None)

NO_SLICE = "no projection inside the module outputs them: a norm or another step comes between"


@dataclass
class Call:
    """One call of the registered function: the module, q0 (head, d_head), k0 and v0 (kv_head,
    d_head) at position 0 of the first text, the returned tensor (kept alive so that its memory
    is not reused), its (q_pos, k_pos) lengths, and the output projection once a module
    consumes it."""

    module: nn.Module
    q0: Tensor
    k0: Tensor
    v0: Tensor
    head_dim: int
    returned: Tensor
    lengths: tuple[int, int]
    output: tuple[nn.Module, bool] | None = None


@dataclass
class Seen:
    """A weight module's first call: its input and output rows of position 0, its layout."""

    x0: Tensor
    y0: Tensor
    transposed: bool


@dataclass
class Recorder:
    calls: list[Call] = field(default_factory=list)
    seen: dict[int, Seen] = field(default_factory=dict)
    #: id -> (module, its output's first row) for each module with a 1-D weight (norms)
    norms: dict[int, tuple[nn.Module, Tensor]] = field(default_factory=dict)
    #: ids of the attention modules still to be seen (called, output read) before the forward
    #: may stop
    wanted: set[int] | None = None

    def attention(
        self, module: nn.Module, query: Tensor, key: Tensor, value: Tensor, returned: Tensor
    ) -> None:
        """From the registered function: query (batch, head, q_pos, d), key and value (batch,
        kv_head, k_pos, d), returned (batch, q_pos, head, d_value)."""
        q0, k0 = query[0, :, 0].detach().clone(), key[0, :, 0].detach().clone()
        v0 = value[0, :, 0].detach().clone()
        lengths = (query.shape[2], key.shape[2])
        self.calls.append(Call(module, q0, k0, v0, query.shape[-1], returned, lengths))

    def norm_call(self, module: nn.Module, y: Tensor) -> None:
        """From a forward hook on a module with a 1-D weight: its output y (..., width)."""
        if id(module) not in self.norms and y.is_floating_point() and y.dim() and y.numel():
            self.norms[id(module)] = (module, y.reshape(-1, y.shape[-1])[0].detach().clone())

    def weight_call(self, module: nn.Module, x: Tensor, y: Tensor) -> None:
        """From a forward hook: module's input x (..., in) and output y (..., out)."""
        transposed = _layout(module, x, y)
        if transposed is None:
            return
        for call in self.calls:
            if call.output is None and _same_memory(x, call.returned):
                call.output = (module, transposed)
                if self.wanted is not None:
                    self.wanted.discard(id(call.module))
                    if not self.wanted:
                        raise _Enough
        if id(module) not in self.seen and x.numel():
            rows_x, rows_y = x.reshape(-1, x.shape[-1]), y.reshape(-1, y.shape[-1])
            self.seen[id(module)] = Seen(
                rows_x[0].detach().clone(), rows_y[0].detach().clone(), transposed
            )


def _same_memory(x: Tensor, returned: Tensor) -> bool:
    return x.data_ptr() == returned.data_ptr() and x.numel() == returned.numel()


def _close(a: Tensor, b: Tensor) -> bool:
    tolerance = 1e-4 if a.dtype == torch.float32 or a.dtype == torch.float64 else 2e-2
    scale = float(b.abs().max()) if b.numel() else 0.0
    return a.shape == b.shape and float((a - b).abs().max()) <= tolerance * max(scale, 1e-6)


def _layout(module: nn.Module, x: Tensor, y: Tensor) -> bool | None:
    """Whether ``module`` computes y = x W + b (True: W stored (in, out)) or x W^T + b (False),
    from its first rows; None for anything else (not a plain affine map of its input)."""
    weight, bias = module.weight, getattr(module, "bias", None)
    if not isinstance(x, Tensor) or not isinstance(y, Tensor) or not x.is_floating_point():
        return None
    if x.dim() == 0 or y.dim() == 0 or not x.numel():
        return None
    x1, y1 = x.reshape(-1, x.shape[-1])[:1], y.reshape(-1, y.shape[-1])[:1]
    with torch.no_grad():
        for transposed, w in ((False, weight), (True, weight.t())):
            if w.shape != (y1.shape[-1], x1.shape[-1]):
                continue
            want = x1.to(w.dtype) @ w.t()
            if isinstance(bias, Tensor) and bias.shape == (w.shape[0],):
                want = want + bias
            if _close(want.to(y1.dtype), y1):
                return transposed
    return None


def _within(gap: Tensor, vector: Tensor) -> Tensor:
    """Whether a gap (max |window - vector|) is within the tolerance of ``vector``'s dtype."""
    tolerance = 1e-4 if vector.dtype in (torch.float32, torch.float64) else 2e-2
    return gap <= tolerance * max(float(vector.abs().max()), 1e-6)


def _slice(rows: Seen, vectors: Tensor) -> list[int] | None:
    """Offsets o with rows.y0[o : o + d] == vectors[h] for each h of (n, d), or None."""
    d = vectors.shape[-1]
    y = rows.y0.to(vectors.dtype)
    if y.shape[0] < d:
        return None
    windows = y.unfold(0, d, 1)  # (out - d + 1, d)
    offsets = []
    for vector in vectors:
        found = _within((windows - vector).abs().amax(-1), vector).nonzero()
        if not len(found):
            return None
        offsets.append(int(found[0, 0]))
    return offsets


@dataclass(frozen=True)
class Claim:
    """Where an entry says one projection's heads are: the module at ``path``, its layout, and
    the first row of each head (head h: rows offsets[h] .. offsets[h] + d - 1)."""

    path: str
    transposed: bool
    offsets: tuple[int, ...]


def _claimed(
    claim: Claim,
    call_module: nn.Module,
    vectors: Tensor,
    recorder: Recorder,
    modules: dict[str, nn.Module],
    exclude: nn.Module | None,
) -> Projection | None:
    """The Projection ``claim`` names when it holds for ``vectors`` (head, d), else None."""
    module = modules.get(claim.path)
    seen = None if module is None or module is exclude else recorder.seen.get(id(module))
    if seen is None or seen.transposed != claim.transposed or len(claim.offsets) != len(vectors):
        return None
    if not any(inner is module for inner in call_module.modules()):
        return None
    d, y = vectors.shape[-1], seen.y0.to(vectors.dtype)
    rows = tuple(r for o in claim.offsets for r in range(o, o + d))
    if min(claim.offsets) < 0 or max(claim.offsets) + d > y.shape[0] or len(set(rows)) < len(rows):
        return None
    for offset, vector in zip(claim.offsets, vectors, strict=True):
        if not _within((y[offset : offset + d] - vector).abs().amax(), vector):
            return None
    return Projection(claim.path, module, claim.transposed, rows)


def claim_of(found: Projection | str | None, heads: int) -> Claim | None:
    """The claim a projection found for ``heads`` heads makes (None where none was found: it
    is searched at every check)."""
    if not isinstance(found, Projection):
        return None
    return Claim(found.path, found.transposed, found.rows[:: len(found.rows) // heads])


def _projection(
    call_module: nn.Module,
    vectors: Tensor,
    recorder: Recorder,
    paths: dict[int, str],
    exclude: nn.Module | None,
) -> Projection | str:
    """The projection inside ``call_module`` whose output at position 0 holds every row of
    ``vectors`` (head, d) as a slice, or the reason there is none."""
    for module in call_module.modules():
        seen = recorder.seen.get(id(module))
        if seen is None or module is exclude:
            continue
        offsets = _slice(seen, vectors)
        if offsets is not None:
            d = vectors.shape[-1]
            rows = tuple(r for o in offsets for r in range(o, o + d))
            return Projection(paths[id(module)], module, seen.transposed, rows)
    return NO_SLICE


def probe(
    model: nn.Module,
    family: str,
    tokens: int = 3,
    inputs: dict | None = None,
    lengths: dict | None = None,
) -> list[HFAttentionLayer]:
    """Each attention module of ``model`` (loaded on headlab's attention) as an
    HFAttentionLayer, in the order a forward calls them. ``inputs``: the forward's keywords
    (default: ``tokens`` token ids; an encoder-decoder or an image model passes its own).
    ``lengths``: filled with id(module) -> its first call's (q_pos, k_pos). Raises ValueError
    when no module calls the attention function."""
    paths = {id(m): name for name, m in model.named_modules()}
    recorder = _observe(model, tokens, inputs=inputs)
    config, modules = model.config.get_text_config(), dict(model.named_modules())
    calls = _first_calls(recorder, family, lengths)
    return [_layer(call, recorder, paths, family, config, None, modules)[0] for call in calls]


#: The three projections a claim may name, in an entry's order.
CLAIMED = ("query", "key", "value")


def probe_first(
    model: nn.Module,
    family: str,
    claims: dict[str, dict[str, Claim | None]],
    tokens: int = 3,
    inputs: dict | None = None,
    lengths: dict | None = None,
) -> tuple[dict[str, HFAttentionLayer], str | None]:
    """The attention layers at the paths of ``claims`` (the first of each template), their
    query, key and value claims checked on the observed forward instead of searched (a claim
    that fails, or None, is searched): (path -> layer, why a claim failed or None). The forward
    stops once each of these layers has been called and its output read: a probe of one layer
    per template. ``inputs`` and ``lengths``: as for ``probe``."""
    paths = {id(m): name for name, m in model.named_modules()}
    config, modules = model.config.get_text_config(), dict(model.named_modules())
    wanted = {id(modules[path]) for path in claims if path in modules}
    recorder = _observe(model, tokens, wanted=wanted, inputs=inputs)
    found, refuted = {}, None
    for call in _first_calls(recorder, family, lengths):
        path = paths[id(call.module)]
        if path in claims and path not in found:
            found[path], why = _layer(call, recorder, paths, family, config, claims[path], modules)
            refuted = refuted or (why and f"{path}: {why}")
    missing = [path for path in claims if path not in found]
    return found, refuted or (missing and f"no call of {', '.join(missing)}") or None


def _first_calls(recorder: Recorder, family: str, lengths: dict | None = None) -> list[Call]:
    """Each attention module's first call, in call order (its lengths into ``lengths``);
    ValueError when there is none."""
    if not recorder.calls:
        raise ValueError(f"family {family!r}: no module called headlab's attention function")
    calls, seen_modules = [], set()
    for call in recorder.calls:
        if id(call.module) not in seen_modules:
            seen_modules.add(id(call.module))
            calls.append(call)
            if lengths is not None:
                lengths[id(call.module)] = call.lengths
    return calls


class _Enough(Exception):
    """Raised from a hook to stop a forward that has shown all that is wanted."""


def _observe(
    model: nn.Module, tokens: int, wanted: set[int] | None = None, inputs: dict | None = None
) -> Recorder:
    """One forward of ``tokens`` tokens (or of ``inputs``, the forward's keywords), observed
    (see the module docstring); with ``wanted`` (module ids), stopped once each of these modules
    has been called and its output read."""
    recorder = Recorder(wanted=None if wanted is None else set(wanted))
    hooks = []

    def hook(module: nn.Module, args: tuple, output: object) -> None:
        if args and isinstance(args[0], Tensor) and isinstance(output, Tensor):
            recorder.weight_call(module, args[0], output)

    def norm_hook(module: nn.Module, args: tuple, output: object) -> None:
        if isinstance(output, Tensor):
            recorder.norm_call(module, output)

    for module in model.modules():
        weight = getattr(module, "weight", None)
        if isinstance(weight, Tensor) and weight.dim() == 2:
            hooks.append(module.register_forward_hook(hook))
        elif isinstance(weight, Tensor) and weight.dim() == 1:
            hooks.append(module.register_forward_hook(norm_hook))
    config = model.config.get_text_config()
    device = next(model.parameters()).device
    if inputs is None:
        ids = (torch.arange(1, tokens + 1, device=device) % int(config.vocab_size))[None]
        inputs = {"input_ids": ids, "attention_mask": torch.ones_like(ids)}
    token = RECORDER.set(recorder)
    try:
        with torch.no_grad():
            model(**inputs)
    except _Enough:
        pass
    finally:
        RECORDER.reset(token)
        for handle in hooks:
            handle.remove()
    return recorder


def _layer(
    call: Call,
    recorder: Recorder,
    paths: dict[int, str],
    family: str,
    config,
    claims: dict[str, Claim | None] | None,
    modules: dict[str, nn.Module],
) -> tuple[HFAttentionLayer, str | None]:
    heads, kv_heads = call.q0.shape[0], call.k0.shape[0]
    output = None
    if call.output is not None:
        module, transposed = call.output
        width = call.returned.shape[-2] * call.returned.shape[-1]
        output = Projection(paths[id(module)], module, transposed, tuple(range(width)))
    embed = output.weight().shape[0] if output is not None else int(config.hidden_size)
    exclude = None if output is None else output.module
    found, refuted = {}, None
    for name, vectors in zip(CLAIMED, (call.q0, call.k0, call.v0), strict=True):
        claim = None if claims is None else claims[name]
        if claim is not None:
            found[name] = _claimed(claim, call.module, vectors, recorder, modules, exclude)
        if found.get(name) is None:
            found[name] = _projection(call.module, vectors, recorder, paths, exclude)
            if claims is not None and (claim is not None or isinstance(found[name], Projection)):
                refuted = refuted or f"its {name} heads are not where the entry says"
    layer = HFAttentionLayer(
        module=call.module,
        path=paths[id(call.module)],
        family=family,
        num_heads=heads,
        num_kv_heads=kv_heads,
        head_dim=call.head_dim,
        embed_dim=embed,
        output=output,
        **found,
        input_norm=_input_norm(call.module, tuple(found.values()), recorder, paths),
    )
    return layer, refuted


def _input_norm(
    call_module: nn.Module, found: tuple, recorder: Recorder, paths: dict[int, str]
) -> Norm | None:
    """The norm in front of the layer: a module with a 1-D weight, a sibling of the attention
    module or of one of its parents (a pre-norm in the same block, not a post-norm of the block
    before), whose output is the input of the layer's projections (the first found of W_Q, W_K,
    W_V); None without one."""
    projection = next((p for p in found if isinstance(p, Projection)), None)
    seen = None if projection is None else recorder.seen.get(id(projection.module))
    if seen is None:
        return None
    where = paths[id(call_module)].split(".")
    for key, (module, y0) in recorder.norms.items():
        parent = paths[key].split(".")[:-1]
        in_block = len(parent) < len(where) and where[: len(parent)] == parent
        if in_block and y0.shape == seen.x0.shape and _close(y0, seen.x0):
            return Norm(paths[key], module)
    return None
