"""The torch side: masks, the module, the trace dataclass."""

from headlab.attention.masks import causal_mask
from headlab.attention.module import MultiHeadAttention
from headlab.attention.trace import AttentionTrace

__all__ = ["AttentionTrace", "MultiHeadAttention", "causal_mask"]
