"""Loading the model kinds beyond one text stream: encoder-decoders and image encoders.

``declared_kind(config)`` says from a checkpoint's config.json alone (before any weight is read)
which kind it is: "encoder-decoder" (``is_encoder_decoder``: T5, BART, Marian, Whisper), "vision"
(ViT, DINOv2, DINOv2 with registers, CLIP, whose vision tower is loaded; a ViT or DINOv2 whose
config declares an image-classification head is loaded with it) or "text".
``load_encoder_decoder`` and ``load_vision`` load a checkpoint folder (or a cached hub id;
fetched only with ``download``) with transformers' own classes on headlab's attention, with the
tokenizer, the feature extractor (Whisper) or the image processor the folder holds. Weights are
safetensors only; a model whose parameters would not fit in memory is refused with the estimate
before they are read.
"""

from __future__ import annotations

from headlab.limits import check_fits
from headlab.models.hf.checkpoint import (
    check_weights,
    fetch_rest,
    first_line,
    locate,
    raw_config,
    read_config,
)
from headlab.models.hf.registry import register
from headlab.models.hf.requirements import require_transformers

#: model_type -> what its vision tower is loaded as (CLIP's checkpoints hold both towers).
VISION_TYPES = {
    "vit": "AutoModel",
    "dinov2": "AutoModel",
    "dinov2_with_registers": "AutoModel",
    "clip": "CLIPVisionModel",
    "clip_vision_model": "CLIPVisionModel",
}
#: model_type of the encoder-decoders that read audio (log-mel frames) rather than text.
AUDIO_TYPES = ("whisper",)


def declared_kind(config: dict | None) -> str:
    """ "encoder-decoder", "vision" or "text" from a config.json (None: "text", the load says
    what is wrong)."""
    if not isinstance(config, dict):
        return "text"
    if config.get("is_encoder_decoder") is True:
        return "encoder-decoder"
    if config.get("model_type") in VISION_TYPES:
        return "vision"
    return "text"


def declared_sampling_rate(folder) -> int | None:
    """The sampling rate a checkpoint's feature extractor reads (preprocessor_config.json), or
    None where it declares none."""
    from headlab.results.input_files import read_json

    path = folder / "preprocessor_config.json"
    if not path.is_file():
        return None
    rate = read_json(path, "").get("sampling_rate")
    return rate if isinstance(rate, int) else None


def _check_size(model_class, config, name: str) -> None:
    """ValueError with the estimate when the parameters (counted on the meta device) would not
    fit in memory."""
    import torch

    with torch.device("meta"):
        built = model_class._from_config(config)
    count = sum(p.numel() for p in built.parameters())
    check_fits(f"{name} ({count:,} parameters in float32)", 4 * count, hint="pick a smaller model")


def _pretrained(model_class, checkpoint, config):
    from transformers.utils import logging

    verbosity, bars = logging.get_verbosity(), logging.is_progress_bar_enabled()
    logging.set_verbosity_error()
    logging.disable_progress_bar()
    try:
        model = model_class.from_pretrained(
            str(checkpoint.folder),
            config=config,
            attn_implementation=register(),
            local_files_only=True,
            use_safetensors=True,
        )
    except (ValueError, OSError, KeyError, RuntimeError) as error:
        raise ValueError(
            f"{checkpoint.name}: transformers cannot load it ({first_line(error)})"
        ) from None
    finally:
        logging.set_verbosity(verbosity)
        if bars:
            logging.enable_progress_bar()
    return model.eval()


def _preprocessor(auto_name: str, checkpoint):
    """The folder's feature extractor or image processor, or None where it has none."""
    if not (checkpoint.folder / "preprocessor_config.json").is_file():
        return None
    import transformers

    try:
        return getattr(transformers, auto_name).from_pretrained(
            str(checkpoint.folder), local_files_only=True
        )
    except (ValueError, OSError, KeyError, TypeError) as error:
        raise ValueError(
            f"{checkpoint.name}: transformers cannot read its preprocessor_config"
            f".json ({first_line(error)})"
        ) from None


def _located(source, download: bool, kind: str):
    require_transformers()
    checkpoint = locate(source, download=download)
    if checkpoint.gguf is not None:
        raise ValueError(
            f"{checkpoint.name}: a GGUF file holds a decoder; {kind}s are read "
            "from a transformers folder"
        )
    found = declared_kind(raw_config(checkpoint))
    if found != kind:
        raise ValueError(
            f"{checkpoint.name}: expected an {kind} model, its config declares a {found} model"
        )
    config = read_config(checkpoint)
    return checkpoint, config


def load_encoder_decoder(source, *, download: bool = False):
    """An ``EncoderDecoderModel`` from a checkpoint folder or cached hub id (see the module
    docstring)."""
    import transformers

    from headlab.models.hf.encoder_decoder import EncoderDecoderModel
    from headlab.models.hf.loader import load_tokenizer

    checkpoint, config = _located(source, download, "encoder-decoder")
    audio = config.model_type in AUDIO_TYPES
    auto = transformers.AutoModelForSpeechSeq2Seq if audio else transformers.AutoModelForSeq2SeqLM
    if type(config) not in auto._model_mapping:
        raise ValueError(
            f"{checkpoint.name}: transformers has no generating class for {config.model_type!r}"
        )
    model_class = auto._model_mapping[type(config)]
    _check_size(model_class, config, checkpoint.name)
    checkpoint = fetch_rest(checkpoint, False)
    check_weights(checkpoint)
    model = _pretrained(model_class, checkpoint, config)
    features = _preprocessor("AutoFeatureExtractor", checkpoint) if audio else None
    return EncoderDecoderModel(
        checkpoint.name, model, load_tokenizer(checkpoint), features, cached=True
    )


def load_vision(source, *, download: bool = False):
    """A ``VisionModel`` (CLIP: its vision tower) from a checkpoint folder or cached hub id."""
    import transformers

    from headlab.models.hf.vision import VisionModel

    checkpoint, config = _located(source, download, "vision")
    name = VISION_TYPES[config.model_type]
    if name == "AutoModel":
        model_class = transformers.AutoModel._model_mapping[type(config)]
        head = _classifier(config)
        model_class = getattr(transformers, head) if head else model_class
    else:
        model_class = getattr(transformers, name)
        config = getattr(config, "vision_config", config)
    _check_size(model_class, config, checkpoint.name)
    checkpoint = fetch_rest(checkpoint, False)
    check_weights(checkpoint)
    model = _pretrained(model_class, checkpoint, config)
    processor = _preprocessor("AutoImageProcessor", checkpoint)
    return VisionModel(checkpoint.name, model, processor, cached=True)


def _classifier(config) -> str | None:
    """The image-classification class a ViT or DINOv2 checkpoint declares (its config's
    ``architectures``), loaded with its head; None for an encoder alone."""
    import transformers

    for name in getattr(config, "architectures", None) or ():
        if name.endswith("ForImageClassification") and hasattr(transformers, name):
            return name
    return None


def refuse_other_kinds(source, command: str = "this command") -> None:
    """ValueError in one line, from the config alone, when ``source`` is an encoder-decoder or
    an image model: ``command`` reads one text stream (say so before any weight is read). A
    checkpoint with a text and an image tower (CLIP) passes: the text route loads its text tower
    (``loader.text_tower``)."""
    from pathlib import Path

    from headlab.models.hf.checkpoint import declared_config
    from headlab.models.hf.loader import TWO_TOWERS

    config = declared_config(source)
    kind = declared_kind(config)
    if kind == "text" or config.get("model_type") in TWO_TOWERS:
        return
    name = Path(str(source)).name or str(source)
    family = config.get("model_type", "?")
    if kind == "vision":
        raise ValueError(
            f"{name}: family {family!r} is an image model (it reads pixel_values, "
            f"not text): {command} reads text; image models run in `headlab model "
            "heads --image`, `model ablate --image` and `circuits --image`"
        )
    raise ValueError(
        f"{name}: family {family!r} is an encoder-decoder: {command} reads one "
        "text stream; encoder-decoders run in `headlab model heads`, `ablate` and "
        "`generate` with --source-text (or --audio)"
    )
