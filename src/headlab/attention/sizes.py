"""Head configurations: checked sizes with their defaults filled in."""

from __future__ import annotations


def check_positive_int(name: str, value: object) -> int:
    """``value`` if it is an int > 0 (not a bool); else ValueError naming ``name``."""
    if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
        raise ValueError(f"{name} must be a positive integer, got {value!r}")
    return value


def resolve_head_sizes(
    embed_dim: int, num_heads: int, head_dim: int | None, num_kv_heads: int | None
) -> tuple[int, int]:
    """Check a head configuration; return (head_dim, num_kv_heads) with defaults filled in."""
    check_positive_int("embed_dim", embed_dim)
    check_positive_int("num_heads", num_heads)
    if head_dim is None:
        if embed_dim % num_heads:
            raise ValueError(
                f"embed_dim={embed_dim} is not divisible by num_heads={num_heads} "
                "(pass head_dim= to choose the head size freely)"
            )
        head_dim = embed_dim // num_heads
    check_positive_int("head_dim", head_dim)
    num_kv_heads = num_heads if num_kv_heads is None else num_kv_heads
    check_positive_int("num_kv_heads", num_kv_heads)
    if num_heads % num_kv_heads:
        raise ValueError(f"num_heads={num_heads} is not divisible by num_kv_heads={num_kv_heads}")
    return head_dim, num_kv_heads
