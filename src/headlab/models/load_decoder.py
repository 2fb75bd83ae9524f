"""Load the hand-built reference Llama-family decoder from a Hugging Face folder (safetensors
only). Not a route: ``headlab.models.load`` runs every model through transformers; this is what
the tests check that route against.

A folder needs ``config.json`` (model_type llama, mistral or qwen2), ``*.safetensors`` and
``tokenizer.json``. A folder with only ``*.bin`` (pickle) weights is refused: headlab never
unpickles. Every error names the file and what is wrong, and comes before any weight is read:
the config's sizes against what the file holds (``weight_files.check_holds``), every tensor's
shape, the tokenizer's ids against the vocabulary.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path

from headlab.models.bpe import check_token_ids, tokenizer_from_file
from headlab.models.decoder import Decoder
from headlab.models.llama import LlamaDecoder
from headlab.models.llama_config import LlamaConfig, read_hf_config
from headlab.models.llama_weights import HF, decoder_state, expected_tensors, load_state
from headlab.models.weight_files import SafetensorsFiles, check_tensors
from headlab.results.input_files import check_model_folder, read_json


def _sizes(config: LlamaConfig, names: Mapping[str, str]) -> str:
    fields = ("num_hidden_layers", "hidden_size", "intermediate_size", "vocab_size")
    return ", ".join(f"{names.get(f, f)}={getattr(config, f)}" for f in fields)


def _safetensors(folder: Path) -> SafetensorsFiles:
    files = sorted(folder.glob("*.safetensors"))
    if not files:
        pickles = sorted(p.name for p in folder.glob("*.bin"))
        found = (
            f" (found {', '.join(pickles)}: pickle, which headlab does not load)" if pickles else ""
        )
        raise ValueError(f"{folder}: no *.safetensors weights{found}")
    return SafetensorsFiles(files)


def load_hf_folder(folder: str | Path) -> Decoder:
    """A Decoder from a Hugging Face folder of the Llama family.

    config.json, the tokenizer and the safetensors headers are checked against each other
    before any weight is read or the model built; each error names the file and the field.
    """
    folder = Path(folder)
    check_model_folder(folder)  # a FIFO is named, not taken as missing (nor opened)
    for name in ("config.json", "tokenizer.json"):
        if not (folder / name).is_file():
            raise FileNotFoundError(f"model folder {folder}: {name} is missing")
    config = read_hf_config(folder / "config.json")
    weights = _safetensors(folder)
    if HF.lm_head not in weights.shapes:
        config = replace(config, tie_word_embeddings=True)
    check_tensors(
        weights.shapes, expected_tensors(config, HF), declared=config.parameters(),
        where=folder / "*.safetensors", config="config.json", sizes=_sizes(config, {}),
    )  # fmt: skip
    tokenizer = tokenizer_from_file(folder / "tokenizer.json")
    check_token_ids(tokenizer, config.vocab_size, folder / "tokenizer.json", "vocab_size")
    model = LlamaDecoder(config)
    load_state(model, decoder_state(weights.read, config, HF), folder)
    return Decoder(folder.name, model, tokenizer, _chat_template(folder))


def _chat_template(folder: Path) -> str | None:
    """The chat template of ``tokenizer_config.json`` (or ``chat_template.jinja``), if any."""
    jinja = folder / "chat_template.jinja"
    if jinja.is_file():
        return jinja.read_text(encoding="utf-8")
    try:
        template = read_json(folder / "tokenizer_config.json", "").get("chat_template")
    except (OSError, ValueError):
        return None
    return template if isinstance(template, str) else None
