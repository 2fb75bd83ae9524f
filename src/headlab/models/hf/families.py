"""Which transformers families headlab can run inside: read from transformers, never listed here.

A family qualifies when its language-model class (or, for encoders, its masked-LM class) calls
its attention through ``AttentionInterface`` (the class flag ``_supports_attention_backend``)
and it is not an encoder-decoder. Listing them all imports every such modeling module (about
ten seconds on 2 cores); loading one checkpoint checks only its own classes (loader.py).
"""

from __future__ import annotations


def _text_mappings() -> tuple[dict, dict]:
    from transformers.models.auto.modeling_auto import (
        MODEL_FOR_CAUSAL_LM_MAPPING_NAMES,
        MODEL_FOR_MASKED_LM_MAPPING_NAMES,
    )

    return MODEL_FOR_CAUSAL_LM_MAPPING_NAMES, MODEL_FOR_MASKED_LM_MAPPING_NAMES


def supports(family: str) -> bool:
    """True when transformers' text model class for model_type ``family`` routes its attention
    through the interface and the family is not an encoder-decoder."""
    import transformers

    for mapping in _text_mappings():
        class_name = mapping.get(family)
        if class_name is None:
            continue
        name = class_name[0] if isinstance(class_name, list | tuple) else class_name
        try:
            model_class = getattr(transformers, name)
        except (AttributeError, ImportError, RuntimeError):
            continue
        config_class = getattr(model_class, "config_class", None)
        if getattr(model_class, "_supports_attention_backend", False) and not getattr(
            config_class, "is_encoder_decoder", False
        ):
            return True
    return False


def supported_families() -> list[str]:
    """The model_types of this transformers whose text models headlab's attention can run,
    sorted. ValueError naming what to install without transformers."""
    from headlab.models.hf.requirements import require_transformers

    require_transformers()
    causal, masked = _text_mappings()
    return sorted(family for family in {*causal, *masked} if supports(family))
