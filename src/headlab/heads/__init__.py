"""Analyses of the heads of any model behind ``headlab.models.HeadModel`` (encoders, decoders).

statistics (what each head attends to), collapse (the same weights viewed with fewer heads),
importance (Michel et al.'s gradient of a loss with respect to a head mask), pruning (physical
removal of heads). Each returns a plain dataclass with ``to_dict`` (the results-file schema).
"""

from headlab.heads.collapse import (
    CollapseResult,
    check_head_counts,
    collapse_head_counts,
    collapse_heads,
    collapse_steps,
    collapsed,
)
from headlab.heads.detectors import DETECTORS, detect_heads
from headlab.heads.embedding_shift import mean_cosine, nn_agreement
from headlab.heads.importance import ImportanceResult, contrastive_objective, head_importance
from headlab.heads.pruning import (
    PruneResult,
    prune_by_importance,
    prune_curve,
    prune_heads,
)
from headlab.heads.statistics import HeadStatistics, head_statistics
from headlab.results.json_store import write_json

__all__ = [
    "DETECTORS",
    "CollapseResult",
    "HeadStatistics",
    "ImportanceResult",
    "PruneResult",
    "check_head_counts",
    "collapse_head_counts",
    "collapse_heads",
    "collapse_steps",
    "collapsed",
    "contrastive_objective",
    "detect_heads",
    "head_importance",
    "head_statistics",
    "mean_cosine",
    "nn_agreement",
    "prune_by_importance",
    "prune_curve",
    "prune_heads",
    "write_json",
]
