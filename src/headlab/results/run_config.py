"""One training run's configuration: a frozen dataclass whose hash (``run_id``) keys results.

Plain data (the ``config`` of every sweep row): ``headlab.experiments.run_sizing`` checks one
(``make_config``) and counts its parameters and memory.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass, fields

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
