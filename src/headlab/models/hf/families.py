"""Which transformers families headlab can run inside: observed in transformers, never listed here.

A family qualifies when its language-model class (or, for an encoder, its masked-LM class),
built from the family's default config, calls the attention function of transformers'
registry in one forward (observe.py: on the meta device, fake tensors, stopped at the first
call), and it is not an encoder-decoder. The class flag ``_supports_attention_backend`` is not
read: StableLM and the hybrids (Jamba, Zamba2, Falcon-H1, Qwen3-Next, ...) call the interface
without it. A hybrid whose default config holds no attention layer (Bamba, Granite-MoE-Hybrid:
every layer a state-space one until a checkpoint says otherwise) is observed once more with
its layers set to attention, in the config's own terms (``attn_layer_indices`` or
``layer_types``). Listing them all imports every family's modeling module and observes each
(about 50 s of CPU time on 2 cores); loading one checkpoint observes only its own config
(loader.py).
"""

from __future__ import annotations

import copy
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from headlab.models.hf.observe import (
    Observation,
    build_observed,
    observe,
    picks_its_own_attention,
)
from headlab.results.family_support import FamilySupport

ENCODER_DECODER = "an encoder-decoder"


def _text_mappings() -> tuple[dict, dict]:
    from transformers.models.auto.modeling_auto import (
        MODEL_FOR_CAUSAL_LM_MAPPING_NAMES,
        MODEL_FOR_MASKED_LM_MAPPING_NAMES,
    )

    return MODEL_FOR_CAUSAL_LM_MAPPING_NAMES, MODEL_FOR_MASKED_LM_MAPPING_NAMES


def _auto_classes() -> list[tuple[dict, type]]:
    """(family -> class name, the Auto class that builds it from a config), language models
    first."""
    from transformers import AutoModelForCausalLM, AutoModelForMaskedLM

    causal, masked = _text_mappings()
    return [(causal, AutoModelForCausalLM), (masked, AutoModelForMaskedLM)]


def _all_attention(config):
    """A copy of ``config`` whose every layer is an attention layer, in its own terms, or None
    where it has no such setting (or refuses it)."""
    layers = getattr(config, "num_hidden_layers", None)
    if not isinstance(layers, int) or layers <= 0:
        return None
    changed = copy.deepcopy(config)
    try:
        if hasattr(changed, "attn_layer_indices"):
            changed.attn_layer_indices = list(range(layers))
        elif isinstance(getattr(changed, "layer_types", None), list):
            changed.layer_types = ["full_attention"] * layers
        else:
            return None
    except (AttributeError, TypeError, ValueError):
        return None
    return changed


def observe_family(family: str) -> Observation:
    """What one observed forward of ``family``'s text model (default config) shows; an
    encoder-decoder or a family transformers cannot build shows an ``error``."""
    from transformers import AutoConfig

    try:
        config = AutoConfig.for_model(family)
    except Exception as error:  # a default config its own validation refuses (gemma4_assistant)
        return Observation(error=f"no default config ({type(error).__name__})")
    if getattr(config, "is_encoder_decoder", False):
        return Observation(error=ENCODER_DECODER)
    seen = Observation(error="no text model class")
    for mapping, auto_class in _auto_classes():
        if family not in mapping:
            continue
        for variant in (config, _all_attention(config)):
            if variant is None:
                continue
            try:
                seen = observe(build_observed(auto_class, variant))
            except Exception as error:
                if picks_its_own_attention(error):
                    return Observation()  # no call: its own attention classes
                why = type(error).__name__
                seen = Observation(error=f"its default config does not build ({why})")
            if seen.calls:
                return seen
        if seen.error is None:  # no call: the family's attention is the same in its other class
            return seen
    return seen


def supports(family: str) -> bool:
    """True when ``family``'s text model calls transformers' attention interface (observed)
    and the family is not an encoder-decoder."""
    return observe_family(family).calls


def text_families() -> list[str]:
    """Every model_type with a language-model or masked-LM class in this transformers, sorted."""
    causal, masked = _text_mappings()
    return sorted({*causal, *masked})


def observe_families(
    on_step: Callable[[int, int, str], None] | None = None,
) -> dict[str, Observation]:
    """family -> what observing its text model (default config) showed, for every family of
    ``text_families()``; ``on_step(done, total, family)`` after each. ValueError naming what to
    install without transformers."""
    from headlab.models.hf.requirements import require_transformers

    require_transformers()
    families = text_families()
    seen = {}
    with _quiet_transformers():
        for done, family in enumerate(families, start=1):
            seen[family] = observe_family(family)
            if on_step is not None:
                on_step(done, len(families), family)
    return seen


def supported_families(on_step: Callable[[int, int, str], None] | None = None) -> list[str]:
    """The model_types of this transformers whose text models headlab's attention can run
    (``observe_families``: a call was seen), sorted."""
    return [family for family, seen in observe_families(on_step).items() if seen.calls]


def family_support(on_step: Callable[[int, int, str], None] | None = None) -> FamilySupport:
    """The families whose text model calls headlab's attention (``observe_families``), and why
    each other one showed nothing (``unobserved_families``)."""
    seen = observe_families(on_step)
    calls = [family for family, observed in seen.items() if observed.calls]
    return FamilySupport(calls, unobserved_families(seen))


def unobserved_families(seen: dict[str, Observation]) -> dict[str, str]:
    """family -> why its default config showed nothing (it does not build, or its forward
    stopped before any call), for the families of ``seen`` that neither call nor compute their
    attention themselves, apart from encoder-decoders: a checkpoint's own config may run."""
    return {
        family: o.error
        for family, o in seen.items()
        if o.error is not None and o.error != ENCODER_DECODER
    }


@contextmanager
def _quiet_transformers() -> Iterator[None]:
    """transformers' warnings about the default configs (kernels not installed, tokens outside
    a vocabulary, ...) off while every family is observed: they concern no model of the user."""
    from transformers.utils import logging

    level = logging.get_verbosity()
    logging.set_verbosity_error()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            yield
    finally:
        logging.set_verbosity(level)
