"""Whether a circuits run fits the model, known before its weights load: from the model's config
and tokenizer (``headlab.models.outline``) and the request alone.

    check_fits_model(request, outline)   the task's inputs within the model's positions (the one
                                         check, ``tasks.check_positions``; a line of the user's
                                         pairs names itself), and the method's peak memory
                                         (``memory_terms``) within the machine's, as compare's
                                         set-ups are (``limits.check_fits``)

``prepare`` checks the built pairs again against the loaded model (the same check), which
covers an outline without a tokenizer yet (a hub checkpoint still to fetch).
"""

from __future__ import annotations

from headlab.circuits.run import CircuitRequest
from headlab.circuits.sweep_cost import SweepCost, check_sweep, sweep_cost
from headlab.circuits.tasks import build_pairs, check_task_length
from headlab.limits import check_fits

FLOAT = 4  # bytes: every activation is float32
# What torch adds on its first forward and backward and the allocator keeps (measured: 100-150
# MiB on a small Llama, docs/circuits.md "Memory").
OVERHEAD = 160 * 2**20


def task_shape(request: CircuitRequest, outline) -> tuple[int, int]:
    """(batch, pos) of the task's clean inputs, checked against the model's positions. Without
    a tokenizer at hand, a lower bound (the induction task's BOS unknown, the other tasks' texts
    one token: their check comes after the load)."""
    task = request.task
    known = check_task_length(task, outline)  # induction, copy: no pairs drawn
    if known is not None:
        return task.n_pairs, known
    if outline.tokenizer is None:
        return task.n_pairs, 1
    pairs = build_pairs(task, outline)  # ioi, greater-than, the user's pairs: the tokenizer's
    return int(pairs.clean.shape[0]), int(pairs.clean.shape[1])


def _shape(config) -> dict[str, int]:
    """The sizes the estimate reads from a transformers config (GPT-2's names are mapped to
    these by transformers itself): layers, width, heads, K/V heads, head size, MLP, vocabulary."""
    text = getattr(config, "text_config", None) or config

    def size(*names: str, default: int = 0) -> int:
        for name in names:
            value = getattr(text, name, None)
            if isinstance(value, int) and not isinstance(value, bool) and value > 0:
                return value
        return default

    width = size("hidden_size", default=1)
    heads = size("num_attention_heads", default=1)
    head_dim = size("head_dim", default=max(1, width // heads))
    return {
        "layers": size("num_hidden_layers", default=1),
        "width": width,
        "heads": heads,
        "kv_heads": size("num_key_value_heads", default=heads),
        "head_dim": head_dim,
        "mlp": size("intermediate_size", "n_inner", default=4 * width),
        "vocab": size("vocab_size", default=1),
    }


def memory_terms(request: CircuitRequest, config, batch: int, pos: int) -> dict[str, int]:
    """The peak of the run's memory beyond the weights, in bytes, in parts keyed by the advice
    that lowers each; fitted to measurements (docs/circuits.md, "Memory"), an upper bound.

    Every method but composition keeps a clean and a corrupted run (the stream entering and
    leaving each block, the heads' outputs, the MLPs' outputs, the logits at the metric's
    positions) and makes logits a few rows at a time for the task's performance; path patching
    adds each sender's write (batch, pos, width) and its patched copies (about 512 MiB, the
    chunk's budget); EAP keeps what the backward needs (the activations of every layer), once
    for EAP-IG's steps too, as node attribution does; the patching sweep (head-patching) holds
    its stacked copies within a fixed budget. Composition reads the weights only."""
    shape = _shape(config)
    layers, width, vocab = shape["layers"], shape["width"], shape["vocab"]
    query = shape["heads"] * shape["head_dim"]
    positions = batch * pos
    lower = f"lower --n-pairs {batch} or the task's {pos} tokens"
    if request.method == "composition":
        return {"the weights' products (composition reads no task)": OVERHEAD}
    stream = (2 * layers + 1) * width + layers * query  # resid, MLP and head outputs, a run
    terms = {
        f"{lower} (the clean and corrupted runs)": 2 * FLOAT * positions * stream,
        f"{lower} (logits over the vocabulary of {vocab})": 3 * FLOAT * positions * vocab,
        f"{lower} (one forward's activations)": FLOAT
        * positions
        * (8 * width + 2 * shape["mlp"] + 4 * query),
        "torch's first backward and the allocator (fixed)": OVERHEAD,
    }
    if request.method == "head-patching":  # no backward: the copies of each patched run
        terms["the patched copies (a fixed budget)"] = 512 * 2**20
        if request.by_position:  # a float per (node, position), in lists, then in JSON
            nodes = layers * (shape["heads"] + shape["kv_heads"] + 1)
            terms[f"{lower} (the by-position table)"] = 96 * nodes * pos
    elif request.method == "path-patching":
        senders = layers * shape["heads"] + layers + 1
        terms[f"{lower} (every sender's write)"] = FLOAT * positions * width * senders
        terms["the patched copies (a fixed budget)"] = 512 * 2**20
    else:
        per_layer = 12 * width + 3 * shape["mlp"] + 6 * query
        terms[f"{lower} (the backward's activations)"] = FLOAT * positions * layers * per_layer
    return terms


def check_fits_model(request: CircuitRequest, outline) -> SweepCost | None:
    """ValueError, before the model loads, for a task whose inputs the model cannot hold or
    whose run would not fit in memory (the estimate, and what lowers its largest part), or a
    by-position patching sweep past its time limit (``sweep_cost.check_sweep``). Returns that
    sweep's cost (None for the other methods), for the command to say."""
    batch, pos = task_shape(request, outline)
    terms = memory_terms(request, outline.config, batch, pos)
    check_fits(
        f"circuits --method {request.method} on {batch} pairs of {pos} tokens",
        sum(terms.values()),
        max((size, advice) for advice, size in terms.items())[1],
    )
    if request.method != "head-patching" or not request.by_position:
        return None
    cost = sweep_cost(_shape(outline.config), batch, pos, by_position=True)
    check_sweep(cost)
    return cost
