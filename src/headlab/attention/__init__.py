"""The torch side: masks, the module, the trace dataclass, interventions."""

from headlab.attention.interventions import ablate, intervene, patch, record
from headlab.attention.masks import causal_mask
from headlab.attention.module import MultiHeadAttention
from headlab.attention.trace import AttentionTrace

__all__ = [
    "AttentionTrace",
    "MultiHeadAttention",
    "ablate",
    "causal_mask",
    "intervene",
    "patch",
    "record",
]
