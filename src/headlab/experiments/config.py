"""One training run's configuration: a frozen dataclass whose hash (``run_id``) keys results."""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass, fields

from headlab.attention.sizes import resolve_head_sizes
from headlab.experiments.tasks import get_task

ATTENTION_KINDS = ("plain", "talking-heads")


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
