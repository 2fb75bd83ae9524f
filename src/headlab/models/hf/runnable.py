"""Whether headlab's attention can run inside a transformers model, from its class and config
alone: one place for the refusals that ``load`` (loader.py, on the meta build) and ``attach``
(on the user's model) share, each one line naming the family.

headlab runs text models, decoders and encoders, whose attention goes through transformers'
``AttentionInterface``. Refused: an encoder-decoder (cross-attention), a model whose input is not
text (transformers' own ``main_input_name`` is not ``input_ids``, or its text config has no
vocabulary: ViT reads ``pixel_values``, Wav2Vec2 ``input_values``), and a class that computes its
attention itself: one forward of it on the meta device calls no attention function (observe.py;
the class flag ``_supports_attention_backend`` is not read: StableLM and the hybrids call the
interface without it).
"""

from __future__ import annotations

from headlab.models.hf.checkpoint import LIST_HINT
from headlab.models.hf.observe import build_observed, observe


def family_of(config) -> str:
    """The config's model_type (its class name when it has none)."""
    return str(getattr(config, "model_type", None) or type(config).__name__)


def model_family(model) -> str:
    """A built model's family: its text config's model_type (its class name when it has none)."""
    text_config = model.config.get_text_config()
    return str(getattr(text_config, "model_type", None) or type(model).__name__)


def refuse_encoder_decoder(config, where: str) -> None:
    """ValueError naming the family when ``config`` is an encoder-decoder's."""
    if getattr(config, "is_encoder_decoder", False):
        raise ValueError(
            f"{where}: family {family_of(config)!r} is an encoder-decoder; this route runs one "
            f"text stream: its heads run through `headlab model heads/ablate/generate "
            f"--source-text` (or --audio), headlab.models.hf.kinds_loader; {LIST_HINT}"
        )


def refuse_unrunnable(model_class: type, config, where: str, built=None) -> None:
    """ValueError naming the family unless ``model_class`` (with ``config``) is a text model
    calling its attention through the interface (see the module docstring). ``built``: the
    model already built by ``observe.build_observed`` (else a twin is built on the meta
    device)."""
    family = family_of(config)
    refuse_not_text(model_class, config, where)
    seen = observe(build_observed(model_class, config) if built is None else built)
    if seen.error is not None:
        raise ValueError(
            f"{where}: family {family!r} ({model_class.__name__}): headlab cannot tell whether it "
            f"calls transformers' AttentionInterface (one forward on the meta device stopped: "
            f"{seen.error}); {LIST_HINT}"
        )
    if not seen.calls:
        raise ValueError(
            f"{where}: family {family!r} ({model_class.__name__}) computes its attention itself, "
            f"not through transformers' AttentionInterface (one observed forward called none), "
            f"so headlab cannot run inside it; {LIST_HINT}"
        )


def refuse_not_text(model_class: type, config, where: str) -> None:
    """ValueError naming the family for an encoder-decoder or a model that does not read text
    (the first two refusals of the module docstring)."""
    family = family_of(config)
    refuse_encoder_decoder(config, where)
    reads = getattr(model_class, "main_input_name", "input_ids")
    text_config = config.get_text_config() if hasattr(config, "get_text_config") else config
    if reads != "input_ids" or getattr(text_config, "vocab_size", None) is None:
        what = reads if reads != "input_ids" else "no vocabulary (no vocab_size)"
        raise ValueError(
            f"{where}: family {family!r} ({model_class.__name__}) reads {what}, not text; "
            f"headlab runs language models and text encoders here, and ViT, DINOv2 and CLIP "
            f"through `headlab model heads/ablate --image`; {LIST_HINT}"
        )
