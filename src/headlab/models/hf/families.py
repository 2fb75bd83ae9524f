"""Which transformers families headlab can run inside: read from transformers, never listed here.

A family qualifies when its language-model class (or, for encoders, its masked-LM class) calls
its attention through ``AttentionInterface`` (the class flag ``_supports_attention_backend``)
and it is not an encoder-decoder. Listing imports every such modeling module (about ten seconds);
loading one checkpoint checks only its own class (loader.py).
"""

from __future__ import annotations


def supported_families() -> list[str]:
    """The model_types of this transformers whose text models headlab's attention can run,
    sorted."""
    import transformers
    from transformers.models.auto.modeling_auto import (
        MODEL_FOR_CAUSAL_LM_MAPPING_NAMES,
        MODEL_FOR_MASKED_LM_MAPPING_NAMES,
    )

    found = set()
    for mapping in (MODEL_FOR_CAUSAL_LM_MAPPING_NAMES, MODEL_FOR_MASKED_LM_MAPPING_NAMES):
        for family, class_name in mapping.items():
            name = class_name[0] if isinstance(class_name, list | tuple) else class_name
            try:
                model_class = getattr(transformers, name)
            except (AttributeError, ImportError, RuntimeError):
                continue
            config_class = getattr(model_class, "config_class", None)
            if getattr(model_class, "_supports_attention_backend", False) and not getattr(
                config_class, "is_encoder_decoder", False
            ):
                found.add(family)
    return sorted(found)
