"""Head configurations: checked sizes with their defaults filled in."""

from __future__ import annotations

FREE_HEAD_DIM = "pass head_dim= to choose the head size freely"


def check_positive_int(name: str, value: object) -> int:
    """``value`` if it is an int > 0 (not a bool); else ValueError naming ``name``."""
    if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
        raise ValueError(f"{name} must be a positive integer, got {value!r}")
    return value


def check_divides(whole: str, whole_value: int, part: str, part_value: int, hint: str = "") -> None:
    """The one head-divisibility check: ValueError ``whole=W is not divisible by part=P`` (the
    callers' argument names, which a CLI maps to its flags) unless ``part_value`` divides it."""
    if whole_value % part_value:
        extra = f" ({hint})" if hint else ""
        raise ValueError(f"{whole}={whole_value} is not divisible by {part}={part_value}{extra}")


def resolve_head_sizes(
    embed_dim: int, num_heads: int, head_dim: int | None, num_kv_heads: int | None
) -> tuple[int, int]:
    """Check a head configuration; return (head_dim, num_kv_heads) with defaults filled in."""
    check_positive_int("embed_dim", embed_dim)
    check_positive_int("num_heads", num_heads)
    if head_dim is None:
        check_divides("embed_dim", embed_dim, "num_heads", num_heads, FREE_HEAD_DIM)
        head_dim = embed_dim // num_heads
    check_positive_int("head_dim", head_dim)
    num_kv_heads = num_heads if num_kv_heads is None else num_kv_heads
    check_positive_int("num_kv_heads", num_kv_heads)
    check_divides("num_heads", num_heads, "num_kv_heads", num_kv_heads)
    return head_dim, num_kv_heads


def parameter_elements(
    embed_dim: int,
    kdim: int,
    vdim: int,
    q_dim: int,
    kv_dim: int,
    *,
    bias: bool,
    add_bias_kv: bool,
) -> int:
    """The scalars of a ``MultiHeadAttention``: W_Q (q_dim, d_model), W_K (kv_dim, kdim), W_V
    (kv_dim, vdim), W_O (d_model, q_dim), the biases (q_dim + 2 kv_dim + d_model) and bias_k /
    bias_v (kv_dim each), counted before any is allocated (d_model = embed_dim)."""
    weights = q_dim * embed_dim + kv_dim * (kdim + vdim) + embed_dim * q_dim
    biases = (q_dim + 2 * kv_dim + embed_dim) if bias else 0
    return weights + biases + (2 * kv_dim if add_bias_kv else 0)
