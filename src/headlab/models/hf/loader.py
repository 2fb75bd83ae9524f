"""Load a transformers checkpoint onto headlab's attention, refusing what cannot run exactly.

    checkpoint = locate(source)                 where it is (checkpoint.py)
    config = read_config(checkpoint)            config.json (its fields checked first,
                                                config_fields.py) or GGUF metadata, no weights
    plan = plan_model(config)                   built on the meta device: the class, causal or
                                                not, the parameter count, each tensor's shape
    check_shapes(plan, held)                    the weights' headers against the plan
                                                (weights_match.py)
    model = plan.model_class.from_pretrained(..., attn_implementation="headlab",
                                             use_safetensors=True)
    check_finite(model); say_unused(info)       NaN named; unused tensors in one warning line

The model class is transformers' own (``AutoModelForCausalLM`` for a causal model, ``AutoModel``
for an encoder); headlab only registers its attention (registry.py). Refused before any weight is
read, each in one line: a malformed config.json field (naming the file and the field), a family
whose attention does not go through ``AttentionInterface`` (observed: one forward of the meta
build calls no attention function, observe.py), an encoder-decoder, a model that does not read
text (runnable.py), a config declaring more layers than its weights hold tensors (before the
meta build) or more parameters than they hold values, a tensor whose shape differs from the
config's, tensors beyond the layers the config declares, a checkpoint whose parameters would not
fit in memory (the estimate from the meta build), pickled weights, remote code without
``trust_remote_code`` (exactly True), and a GGUF file without accelerate (requirements.py).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from headlab.limits import check_fits
from headlab.models.hf.checkpoint import (
    LIST_HINT,
    Checkpoint,
    check_reads_text,
    check_weights,
    consent,
    fetch_rest,
    first_line,
    locate,
    read_config,
)
from headlab.models.hf.observe import build_observed, picks_its_own_attention
from headlab.models.hf.registry import register
from headlab.models.hf.requirements import require_accelerate
from headlab.models.hf.runnable import (
    family_of,
    refuse_encoder_decoder,
    refuse_not_text,
    refuse_unrunnable,
)
from headlab.models.hf.weights_match import check_finite, check_shapes, say_unused
from headlab.models.quiet_loading import quiet_loading
from headlab.models.weight_files import checkpoint_shapes, held_values


@dataclass(frozen=True)
class Plan:
    """What loading a config would build: ``model_class`` (a transformers class), whether its
    attention is causal, its parameter count, and the shape of each tensor (state_dict names)."""

    model_class: type
    causal: bool
    parameters: int
    shapes: dict = field(default_factory=dict)  # name -> shape of every tensor it would hold
    prefix: str = ""  # the base model's name inside it (``base_model_prefix``)


#: What transformers' code raises on a config it cannot build a model from (besides ValueError).
BUILD_ERRORS = (KeyError, TypeError, AttributeError, ArithmeticError, IndexError, RuntimeError)


def _on_meta(auto_class: type, config, trust_remote_code: bool, where: str):
    """``auto_class`` built from ``config`` on the meta device, its attention set to the
    observer (observe.py): ``refuse_unrunnable`` watches one forward of it. None when
    transformers has no such class for the config; ValueError naming the family for a config
    its code fails on (one line, not the traceback of whatever it met first)."""
    remote = consent(trust_remote_code) and auto_class.__name__ in (
        getattr(config, "auto_map", None) or {}
    )
    if type(config) not in auto_class._model_mapping and not remote:
        return None
    try:
        return build_observed(auto_class, config, trust_remote_code)
    except (ValueError, *BUILD_ERRORS) as error:
        if picks_its_own_attention(error):
            raise ValueError(
                f"{where}: family {family_of(config)!r} ({auto_class.__name__}) computes its "
                "attention itself (one of its own attention classes, chosen by name), not "
                f"through transformers' AttentionInterface, so headlab cannot run inside it; "
                f"{LIST_HINT}"
            ) from None
        raise ValueError(
            f"{where}: transformers cannot build a {family_of(config)!r} model from its config "
            f"({type(error).__name__}: {first_line(error)})"
        ) from None


def plan_model(config, where: str, trust_remote_code: bool = False) -> Plan:
    """The ``Plan`` for ``config``, from the config alone (the model is built on the meta
    device: no memory, no weights). Raises ValueError naming ``where`` and the family."""
    from transformers import AutoModel, AutoModelForCausalLM

    family = family_of(config)
    refuse_encoder_decoder(config, where)  # before the build: no model class needed
    encoder = _encoder_class(config)
    if encoder is not None:  # an encoder-decoder family's encoder alone (T5EncoderModel)
        return _encoder_plan(encoder, config, where)
    base = _on_meta(AutoModel, config, trust_remote_code, where)
    if base is None:
        raise ValueError(f"{where}: transformers has no model class for {family!r}; {LIST_HINT}")
    refuse_unrunnable(type(base), config, where, built=base)
    causal = any(getattr(m, "is_causal", False) is True for m in base.modules())
    model = base
    if causal:
        model = _on_meta(AutoModelForCausalLM, config, trust_remote_code, where)
        if model is None:
            raise ValueError(
                f"{where}: family {family!r} is causal but transformers has no language-model "
                f"class for it; {LIST_HINT}"
            )
        refuse_not_text(type(model), config, where)  # its attention is base's, observed
    return Plan(
        type(model),
        causal,
        sum(p.numel() for p in model.parameters()),
        {name: tuple(t.shape) for name, t in model.state_dict().items()},
        str(getattr(model, "base_model_prefix", "") or ""),
    )


def _encoder_class(config) -> type | None:
    """The transformers class of an encoder-decoder family's encoder alone, where the config
    names one (``architectures``: "T5EncoderModel", "MT5EncoderModel"...) and is not an
    encoder-decoder's; None otherwise (AutoModel would build the whole encoder-decoder, whose
    decoder reads as causal)."""
    import transformers

    if getattr(config, "is_encoder_decoder", False):
        return None
    for name in getattr(config, "architectures", None) or ():
        if isinstance(name, str) and name.endswith("EncoderModel"):
            found = getattr(transformers, name, None)
            if isinstance(found, type) and found.config_class is type(config):
                return found
    return None


def _encoder_plan(model_class: type, config, where: str) -> Plan:
    """The ``Plan`` of ``model_class``, an encoder alone, built on the meta device."""
    try:
        model = build_observed(model_class, config)
    except (ValueError, *BUILD_ERRORS) as error:
        raise ValueError(
            f"{where}: transformers cannot build {model_class.__name__} from its config "
            f"({type(error).__name__}: {first_line(error)})"
        ) from None
    refuse_unrunnable(model_class, config, where, built=model)
    return Plan(
        model_class,
        False,
        sum(p.numel() for p in model.parameters()),
        {name: tuple(t.shape) for name, t in model.state_dict().items()},
        str(getattr(model, "base_model_prefix", "") or ""),
    )


def check_memory(plan: Plan, dtype: torch.dtype, where: str) -> None:
    """ValueError with the estimate when the parameters alone would not fit."""
    nbytes = plan.parameters * torch.empty((), dtype=dtype).element_size()
    check_fits(
        f"{where} ({plan.parameters:,} parameters in {str(dtype).removeprefix('torch.')})",
        nbytes,
        hint="pick a smaller model or a smaller dtype",
    )


def check_layers_held(config, held: dict | None, where: str) -> None:
    """ValueError before the meta build (which for a million declared layers alone takes
    minutes and gigabytes): every layer holds at least one tensor, so a config declaring more
    layers than its weights hold tensors cannot be loaded."""
    layers = getattr(config, "num_hidden_layers", None)
    if held is not None and isinstance(layers, int) and layers > len(held):
        raise ValueError(
            f"{where}: its config declares num_hidden_layers={layers}, but its weights hold "
            f"{len(held)} tensors; refused before building the model"
        )


def check_parameters_held(plan: Plan, held: dict | None, where: str) -> None:
    """ValueError when the model the config builds has more parameters than the weights hold
    values (transformers would fill the rest with random numbers)."""
    if held is not None and plan.parameters > held_values(held.values()):
        raise ValueError(
            f"{where}: its config makes {plan.parameters:,} parameters, but its weights hold "
            f"{held_values(held.values()):,} values in {len(held)} tensors; refused before "
            "reading any weight"
        )


def load_tokenizer(checkpoint: Checkpoint, trust_remote_code: bool = False):
    """The checkpoint's tokenizer (transformers' class), or None when it has none. ValueError in
    one line naming the file for one that cannot be built: the tokenizers library raises a bare
    ``Exception`` (a BPE merge naming a token outside the vocabulary, in a ``tokenizer.json`` or
    a GGUF's ``tokenizer.ggml.merges``), transformers a ValueError, OSError or KeyError."""
    from transformers import AutoTokenizer, PreTrainedTokenizerFast

    folder = checkpoint.folder
    plain = checkpoint.gguf is None and not (folder / "tokenizer_config.json").is_file()
    if plain and not (folder / "tokenizer.json").is_file():
        return None
    where = folder / (checkpoint.gguf or "tokenizer.json")
    try:
        if plain:
            return PreTrainedTokenizerFast(tokenizer_file=str(where))
        return AutoTokenizer.from_pretrained(
            str(folder),
            gguf_file=checkpoint.gguf,
            local_files_only=True,
            trust_remote_code=consent(trust_remote_code),
        )
    except Exception as error:
        if type(error) is not Exception and not isinstance(error, ValueError | OSError | KeyError):
            raise
        how = "not a readable tokenizer" if plain else "transformers cannot read its tokenizer"
        raise ValueError(f"{where}: {how} ({first_line(error)})") from None


#: model_type of checkpoints that hold a text tower beside an image tower: the text route loads
#: the text tower alone (its weights are the checkpoint's ``text_model.*``).
TWO_TOWERS = ("clip",)


def text_tower(config):
    """The config the text route builds: a two-tower checkpoint's text config (CLIP's
    ``CLIPTextConfig``, whose model is ``CLIPTextModel``), any other config as it is."""
    if getattr(config, "model_type", None) in TWO_TOWERS:
        return config.text_config
    return config


def load_pretrained(
    source,
    *,
    download: bool = False,
    trust_remote_code: bool = False,
    dtype: torch.dtype = torch.float32,
    reads_text: bool = False,
):
    """(model, tokenizer or None, checkpoint): the checkpoint ``source`` names, loaded by
    transformers with ``attn_implementation="headlab"``, in eval mode. TypeError when
    ``trust_remote_code`` is neither True nor False (``consent``); with ``reads_text``, a
    ValueError for a checkpoint without a tokenizer, after every other check and before the
    weights are read."""
    trust_remote_code = consent(trust_remote_code)
    checkpoint = locate(source, download=download)
    if checkpoint.gguf is not None:
        require_accelerate(checkpoint.name)
    full = read_config(checkpoint, trust_remote_code)
    config = text_tower(full)
    held = checkpoint_shapes(checkpoint.folder, checkpoint.gguf)  # None: fetched later
    check_layers_held(config, held, checkpoint.name)
    plan = plan_model(config, checkpoint.name, trust_remote_code)
    check_parameters_held(plan, held, checkpoint.name)
    check_memory(plan, dtype, checkpoint.name)
    checkpoint = fetch_rest(checkpoint, trust_remote_code)
    check_weights(checkpoint)
    if reads_text:  # after the config's and the family's checks (a hub's files are here now)
        check_reads_text(checkpoint)
    if held is None:  # a hub checkpoint: its weights are here now
        held = checkpoint_shapes(checkpoint.folder, checkpoint.gguf)
    weights = checkpoint.folder / (checkpoint.gguf or "")
    check_shapes(
        plan.shapes, plan.prefix, held or {}, config, str(weights), gguf=checkpoint.gguf is not None
    )
    tokenizer = load_tokenizer(checkpoint, trust_remote_code)  # refused before the weights
    extra = {} if checkpoint.gguf is not None else {"use_safetensors": True}
    try:
        with quiet_loading(gguf=checkpoint.gguf is not None):
            model, info = plan.model_class.from_pretrained(
                str(checkpoint.folder),
                gguf_file=checkpoint.gguf,
                config=config,
                attn_implementation=register(),
                dtype=dtype,
                local_files_only=True,
                trust_remote_code=trust_remote_code,
                output_loading_info=True,
                **extra,
            )
    except (ValueError, OSError, KeyError, RuntimeError) as error:
        why = first_line(error)
        if "ignore_mismatched_sizes" in why:  # its "above report" is silenced: say what it means
            why = "tensors whose shapes do not fit the sizes its metadata or config declares"
        raise ValueError(f"{checkpoint.name}: transformers cannot load it ({why})") from None
    check_finite(model, str(weights))
    if config is not full:  # the image tower and the projections are not the text tower's
        unused = [k for k in info.get("unexpected_keys") or () if k.startswith("text_model.")]
        info = {**info, "unexpected_keys": unused}
    say_unused(info, checkpoint.name)
    return model.eval(), tokenizer, checkpoint
