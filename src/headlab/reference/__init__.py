"""The math in NumPy: softmax, attention, multi-head attention; forward and hand-written backward.

No torch here: these functions are the outside reference that the torch module is tested against.
"""

from headlab.reference.attention import additive_mask, attention, attention_backward
from headlab.reference.multi_head import (
    HeadGrads,
    MultiHeadCache,
    MultiHeadGrads,
    MultiHeadParams,
    head_outputs_backward,
    merge_heads,
    multi_head_attention,
    multi_head_attention_backward,
    split_heads,
)
from headlab.reference.softmax import softmax

__all__ = [
    "HeadGrads",
    "MultiHeadCache",
    "MultiHeadGrads",
    "MultiHeadParams",
    "additive_mask",
    "attention",
    "attention_backward",
    "head_outputs_backward",
    "merge_heads",
    "multi_head_attention",
    "multi_head_attention_backward",
    "softmax",
    "split_heads",
]
