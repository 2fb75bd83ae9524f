"""headlab: exact, fast and inspectable multi-head attention."""

from headlab.analysis import (
    Comparison,
    compare,
    explain,
    gradient_coupling,
    head_gradient_norms,
    parameter_count,
    parameter_table,
)
from headlab.attention import AttentionTrace, MultiHeadAttention, causal_mask

__all__ = [
    "AttentionTrace",
    "Comparison",
    "MultiHeadAttention",
    "causal_mask",
    "compare",
    "explain",
    "gradient_coupling",
    "head_gradient_norms",
    "parameter_count",
    "parameter_table",
]
__version__ = "0.1.0"
