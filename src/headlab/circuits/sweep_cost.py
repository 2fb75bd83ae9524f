"""What the patching sweep (``head_patching``) costs, known before the model loads: from the
model's config, the task's sizes and this machine's speed at a matrix product of the model's own
shapes.

The sweep patches every unit (each query head, each K/V group of a GQA layer, each MLP) once,
and with ``by_position`` once more per position; a run patched at layer l runs layers l .. L-1
on the pairs and unembeds the kept positions. Its floating-point operations, summed over the
runs (``sweep_flops``: the projections, the MLP, the scores and the weighted values of each
layer, the unembedding at one position a text), divided by the rate of one product of the
MLP's shapes on this machine (``product_rate``, the best of a few, by the process's CPU time on
the threads torch has now), give a time that the sweep cannot beat (``SweepCost.seconds``: the
norms, softmaxes, the unembedding's other positions and the run's bookkeeping come on top).
``check_sweep`` refuses a by-position sweep whose time passes ``SWEEP_LIMIT_S``, with the
estimate and what lowers it.
"""

from __future__ import annotations

import dataclasses
import time

from headlab.results.patching_estimate import SweepCost, duration

#: A by-position sweep whose lower bound passes this is refused before the load.
SWEEP_LIMIT_S = 30 * 60
#: Rows of the product timed by ``product_rate``.
RATE_ROWS = 512


def layer_flops(shape: dict[str, int], batch: int, pos: int) -> float:
    """FLOPs of one layer on ``batch`` texts of ``pos`` tokens: q, k, v and W_O, the MLP's
    three products (two for a plain MLP: counted as three, an upper bound of the two), the scores
    and the weighted values (a causal half of pos x pos)."""
    width, query = shape["width"], shape["heads"] * shape["head_dim"]
    kv = shape["kv_heads"] * shape["head_dim"]
    per_token = width * (2 * query + 2 * kv) + 3 * width * shape["mlp"]
    attention = 2 * shape["heads"] * shape["head_dim"] * pos * (pos + 1) / 2
    return 2.0 * batch * (pos * per_token + attention)


def sweep_flops(shape: dict[str, int], batch: int, pos: int, by_position: bool) -> SweepCost:
    """The sweep's runs and FLOPs (rate 1: ``SweepCost.seconds`` is then the FLOPs)."""
    layers = shape["layers"]
    grouped = shape["kv_heads"] < shape["heads"]
    per_layer = shape["heads"] + (shape["kv_heads"] if grouped else 0) + 1  # heads, groups, MLP
    places = 1 + (pos if by_position else 0)
    one_layer = layer_flops(shape, batch, pos)
    unembed = 2.0 * batch * shape["width"] * shape["vocab"]  # one kept position a text, at least
    layer_runs = per_layer * places * sum(layers - layer for layer in range(layers))
    runs = per_layer * places * layers
    flops = layer_runs * one_layer + runs * unembed
    forward = layers * one_layer + unembed
    return SweepCost(per_layer * layers, places, runs, layer_runs, flops / forward, flops, 1.0)


def product_rate(width: int, mlp: int, rows: int = RATE_ROWS) -> float:
    """FLOP/s of a (rows, width) x (width, mlp) float32 product here, on torch's threads: the
    best of three (after one to warm up), each timed by the process's CPU time (what a busy
    machine's other work does not add to) shared among the threads. The sweep stacks its runs'
    copies into products of thousands of rows, whatever the task's size: ``RATE_ROWS`` stands
    for them."""
    import torch

    a, b = torch.randn(rows, width), torch.randn(width, mlp)
    best = float("inf")
    for _ in range(4):
        start = time.process_time()
        a @ b
        best = min(best, time.process_time() - start)
    return 2.0 * rows * width * mlp * torch.get_num_threads() / max(best, 1e-9)


def sweep_cost(shape: dict[str, int], batch: int, pos: int, by_position: bool, rate=None):
    """``SweepCost`` of the sweep at ``rate`` FLOP/s (None: ``product_rate`` measured now)."""
    cost = sweep_flops(shape, batch, pos, by_position)
    if rate is None:
        rate = product_rate(shape["width"], shape["mlp"])
    return dataclasses.replace(cost, rate=float(rate))


def check_sweep(cost: SweepCost) -> None:
    """ValueError, with the estimate, for a by-position sweep past ``SWEEP_LIMIT_S``."""
    if cost.places > 1 and cost.seconds > SWEEP_LIMIT_S:
        raise ValueError(
            f"by_position must fit in {duration(SWEEP_LIMIT_S)}: {cost.says()}; refused before "
            f"starting: leave out by_position (the sweep of whole nodes takes 1/{cost.places} "
            "of it), or lower n_pairs or the length of the pairs"
        )


__all__ = [
    "SWEEP_LIMIT_S",
    "SweepCost",
    "check_sweep",
    "layer_flops",
    "product_rate",
    "sweep_cost",
    "sweep_flops",
]
