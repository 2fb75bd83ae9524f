"""One training run's configuration: a frozen dataclass whose hash (``run_id``) keys results."""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass, fields

from headlab.attention.sizes import resolve_head_sizes
from headlab.experiments.tasks import get_task

ATTENTION_KINDS = ("plain", "talking-heads")
# What a run's first training step adds beyond its tensors (autograd, optimiser and allocator
# set-up; measured in docs/experiments.md, "Memory").
RUN_OVERHEAD = 128 * 2**20


@dataclass(frozen=True)
class RunConfig:
    """Everything that determines a run. ``head_dim`` and ``num_kv_heads`` are always resolved
    (never None), so the same model has one run_id however it was asked for."""

    task: str
    num_heads: int
    num_kv_heads: int
    head_dim: int
    d_model: int
    layers: int
    seed: int
    steps: int
    batch_size: int = 32
    lr: float = 3e-3
    mlp_ratio: int = 2
    eval_every: int = 100
    eval_size: int = 512
    attention: str = "plain"  # or "talking-heads" (headlab.attention.talking_heads)

    def to_dict(self) -> dict:
        """The fields as a dict; ``attention`` only when it is not "plain", so that plain runs
        keep the run_id (and results rows) they had before talking heads existed."""
        data = asdict(self)
        if data["attention"] == "plain":
            del data["attention"]
        return data

    @property
    def run_id(self) -> str:
        """sha256 (first 16 hex digits) of the canonical JSON of the config."""
        canonical = json.dumps(self.to_dict(), sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(canonical.encode()).hexdigest()[:16]

    def parameters(self) -> int:
        """The parameter count of this run's TinyTransformer (experiments/model.py), without
        building it."""
        spec = get_task(self.task)[0]
        d, r = self.d_model, self.mlp_ratio
        q, kv = self.num_heads * self.head_dim, self.num_kv_heads * self.head_dim
        mixing = 2 * self.num_heads**2 if self.attention == "talking-heads" else 0
        attention = (q + 2 * kv) * (d + 1) + (q + 1) * d + mixing
        block = 4 * d + attention + (d + 1) * r * d + (r * d + 1) * d
        outputs = spec.num_outputs if spec.readout == "last" else 1
        readout = (d + 1) * outputs * spec.num_classes
        return (sum(spec.vocab_sizes) + spec.seq_len) * d + self.layers * block + 2 * d + readout

    def memory_estimate(self) -> int:
        """Bytes a run adds at its peak (``train.run_one``), fitted to measurements
        (docs/experiments.md, "Memory"): weights, gradients and AdamW's two states (4 copies of
        the parameters); the activations autograd keeps for one training step (every layer's
        LayerNorms, projections, MLP, and for talking heads the (q_pos, k_pos) matrices); the
        evaluation's per-layer weights (batch, head, q_pos, k_pos) on eval_size examples; and
        what torch allocates on the first step. The estimate is of one process: a sweep on N
        workers runs N at once."""
        spec = get_task(self.task)[0]
        s, d, r, h = spec.seq_len, self.d_model, self.mlp_ratio, self.num_heads
        q, kv = h * self.head_dim, self.num_kv_heads * self.head_dim
        per_position = 8 * d + 3 * q + 2 * kv + 2 * r * d
        matrices = 6 * h * s if self.attention == "talking-heads" else 0
        train = 2 * self.batch_size * s * (per_position + matrices) * self.layers
        # every layer's weights kept, and one layer's scores, weights and entropy terms at once
        evaluate = self.eval_size * s * ((self.layers + 3) * h * s + per_position)
        return 4 * (4 * self.parameters() + train + evaluate) + RUN_OVERHEAD

    @classmethod
    def from_dict(cls, data: dict) -> RunConfig:
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in known})


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
