"""headlab: exact, fast and inspectable multi-head attention."""

from headlab.attention import AttentionTrace, MultiHeadAttention, causal_mask

__all__ = ["AttentionTrace", "MultiHeadAttention", "causal_mask"]
__version__ = "0.1.0"
