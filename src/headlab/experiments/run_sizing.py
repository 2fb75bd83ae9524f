"""One training run's configuration checked (``make_config``), its parameter count and its memory.

The configuration itself, ``RunConfig``, is plain data in ``headlab.results.run_config``.
"""

from __future__ import annotations

from headlab.attention.sizes import resolve_head_sizes
from headlab.experiments.sweep_tasks import get_task
from headlab.results.run_config import ATTENTION_KINDS, RunConfig

# What a run's first training step adds beyond its tensors (autograd, optimiser and allocator
# set-up; measured in docs/experiments.md, "Memory").
RUN_OVERHEAD = 128 * 2**20
# Beside a competing process the kernel's blocks run on worker threads (attention/workers.py),
# each allocating from its own glibc arena: the same run peaked 13-30% higher there (multi-lookup,
# 8 heads, d_model 512, 3 layers: 363-476 MB busy, 365-372 MB quiet).
BUSY_FACTOR = 1.15


def run_parameters(config: RunConfig) -> int:
    """The parameter count of ``config``'s TinyTransformer (experiments/tiny_transformer.py),
    without building it."""
    spec = get_task(config.task)[0]
    d, r = config.d_model, config.mlp_ratio
    q, kv = config.num_heads * config.head_dim, config.num_kv_heads * config.head_dim
    mixing = 2 * config.num_heads**2 if config.attention == "talking-heads" else 0
    attention = (q + 2 * kv) * (d + 1) + (q + 1) * d + mixing
    block = 4 * d + attention + (d + 1) * r * d + (r * d + 1) * d
    outputs = spec.num_outputs if spec.readout == "last" else 1
    readout = (d + 1) * outputs * spec.num_classes
    return (sum(spec.vocab_sizes) + spec.seq_len) * d + config.layers * block + 2 * d + readout


def run_memory_estimate(config: RunConfig) -> int:
    """Bytes a run adds at its peak (``train.run_one``), fitted to measurements
    (docs/experiments.md, "Memory"): weights, gradients and AdamW's two states (4 copies of
    the parameters); the activations autograd keeps for one training step (every layer's
    LayerNorms, projections, MLP, and for talking heads the (q_pos, k_pos) matrices); the
    evaluation's per-layer weights (batch, head, q_pos, k_pos) on eval_size examples; and
    what torch allocates on the first step. The estimate is of one process: a sweep on N
    workers runs N at once."""
    spec = get_task(config.task)[0]
    s, d, r, h = spec.seq_len, config.d_model, config.mlp_ratio, config.num_heads
    q, kv = h * config.head_dim, config.num_kv_heads * config.head_dim
    per_position = 8 * d + 3 * q + 2 * kv + 2 * r * d
    matrices = 6 * h * s if config.attention == "talking-heads" else 0
    train = 2 * config.batch_size * s * (per_position + matrices) * config.layers
    # every layer's weights kept, and one layer's scores, weights and entropy terms at once
    evaluate = config.eval_size * s * ((config.layers + 3) * h * s + per_position)
    tensors = 4 * (4 * run_parameters(config) + train + evaluate)
    return int(BUSY_FACTOR * tensors) + RUN_OVERHEAD


def make_config(
    task: str,
    num_heads: int,
    *,
    d_model: int = 64,
    layers: int = 1,
    seed: int = 0,
    steps: int = 1000,
    num_kv_heads: int | None = None,
    head_dim: int | None = None,
    **training: object,
) -> RunConfig:
    """Check a configuration and fill in defaults; ValueError (one line) when it cannot run."""
    get_task(task)
    head_dim, num_kv_heads = resolve_head_sizes(d_model, num_heads, head_dim, num_kv_heads)
    attention = training.get("attention", "plain")
    if attention not in ATTENTION_KINDS:
        raise ValueError(
            f"attention must be one of {', '.join(ATTENTION_KINDS)}, got {attention!r}"
        )
    if attention == "talking-heads" and num_kv_heads != num_heads:
        raise ValueError("talking-heads attention needs num_kv_heads == num_heads (no GQA)")
    for name, value in (("layers", layers), ("steps", steps)):
        if not isinstance(value, int) or value <= 0:
            raise ValueError(f"{name} must be a positive integer, got {value!r}")
    if seed < 0:
        raise ValueError(f"seed must be >= 0, got {seed}")
    return RunConfig(
        task=task,
        num_heads=num_heads,
        num_kv_heads=num_kv_heads,
        head_dim=head_dim,
        d_model=d_model,
        layers=layers,
        seed=seed,
        steps=steps,
        **training,  # type: ignore[arg-type]
    )
