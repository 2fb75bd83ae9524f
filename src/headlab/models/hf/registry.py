"""headlab's entries in transformers' two registries, under one name that no one else uses.

``register()`` adds ``NAME`` to ``AttentionInterface`` (the attention function) and to
``AttentionMaskInterface`` (the lazy mask; a name registered only in the first would get no mask
at all). It adds those two keys and nothing else: an existing entry ("sdpa", "eager", ...) is
never replaced, and a model loaded with another implementation runs exactly as before. Calling
it again is a no-op; a foreign function already under ``NAME`` is refused.
"""

from __future__ import annotations

#: The ``attn_implementation`` of a model on headlab's attention.
NAME = "headlab"


def register() -> str:
    """Register headlab's attention and mask functions under ``NAME``; return ``NAME``.

    Raises RuntimeError when ``NAME`` already holds a function that is not headlab's.
    """
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface

    from headlab.models.hf.attention_function import headlab_attention
    from headlab.models.hf.lazy_mask import headlab_mask

    for interface, function in (
        (AttentionInterface, headlab_attention),
        (AttentionMaskInterface, headlab_mask),
    ):
        present = interface._global_mapping.get(NAME)
        if present is None:
            interface.register(NAME, function)
        elif present is not function:
            raise RuntimeError(
                f"transformers' {interface.__name__} already holds {NAME!r} "
                f"({getattr(present, '__qualname__', present)!r}), expected headlab's "
                f"{function.__qualname__}; refusing to replace it"
            )
    return NAME
