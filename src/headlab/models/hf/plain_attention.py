"""What a family's attention adds to a plain scaled causal softmax, read from its config alone:
QK-norm, a soft-cap of the scores, sliding-window layers, attention sinks.

The at-length machinery (``context_run``, the held q/k map of ``circuits/qk_maps.py``) reads a
plain causal softmax with one norm in front. Some of these extras are module attributes that the
run can see (Gemma 2's ``attn_logit_softcapping``, gpt-oss' ``sinks``); others live only in the
config that builds the mask (Mistral's ``sliding_window``: ``MistralAttention`` keeps no such
attribute, and its window is in the mask). So the config is read here, by the command before
any weight loads and by ``context_run`` at run time.
"""

from __future__ import annotations

#: Families whose attention normalises q and k (QK-norm) whatever their config's flags say.
QK_NORM_FAMILIES = frozenset(
    {"qwen3", "qwen3_moe", "olmo2", "olmo3", "olmoe", "gemma3", "gemma3_text", "chameleon"}
)
#: Config flags that turn QK-norm on in the families that have it as an option.
QK_NORM_FLAGS = ("use_qk_norm", "qk_layernorm", "qk_norm")
#: Families whose attention adds learned sinks to the softmax.
SINK_FAMILIES = frozenset({"gpt_oss"})


def text_config(config):
    """The text model's config of ``config`` (itself for a text model)."""
    return config.get_text_config() if hasattr(config, "get_text_config") else config


def sliding_layer(config, index: int) -> bool:
    """Whether block ``index`` attends through a sliding window: its ``layer_types`` entry where
    the config lists them, else the config's ``sliding_window`` (unless ``use_sliding_window``
    is false, as Qwen 2 writes it)."""
    text = text_config(config)
    types = getattr(text, "layer_types", None)
    if isinstance(types, list | tuple) and index < len(types):
        return types[index] == "sliding_attention"
    window = getattr(text, "sliding_window", None)
    return window is not None and getattr(text, "use_sliding_window", True) is not False


def slides(config, module, index: int) -> bool:
    """Whether block ``index`` attends through a sliding window: its attention ``module``'s own
    ``sliding_window`` attribute, or ``config``'s (``sliding_layer``; Mistral keeps it there
    only; ``config`` None: the module alone)."""
    if getattr(module, "sliding_window", None) is not None:
        return True
    return config is not None and sliding_layer(config, index)


def attention_extras(config) -> str | None:
    """What ``config``'s attention adds to a plain causal softmax with one norm in front, in
    words ("QK-norm (family qwen3)"); None where nothing is known to (the run checks its
    modules again)."""
    text = text_config(config)
    family = str(getattr(text, "model_type", "") or "")
    if family in QK_NORM_FAMILIES or any(getattr(text, f, False) is True for f in QK_NORM_FLAGS):
        return f"QK-norm (family {family})"
    if getattr(text, "attn_logit_softcapping", None) is not None:
        return f"a soft-cap of the scores (family {family})"
    layers = getattr(text, "num_hidden_layers", None)
    if any(sliding_layer(text, i) for i in range(layers if isinstance(layers, int) else 1)):
        return f"sliding-window layers (family {family})"
    if family in SINK_FAMILIES:
        return f"attention sinks (family {family})"
    return None


__all__ = ["attention_extras", "slides", "sliding_layer", "text_config"]
