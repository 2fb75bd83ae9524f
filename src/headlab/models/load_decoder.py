"""Load a Llama-family decoder: from a GGUF file, or a Hugging Face folder (safetensors only).

A folder needs ``config.json`` (model_type llama, mistral or qwen2), ``*.safetensors`` and
``tokenizer.json``. A folder with only ``*.bin`` (pickle) weights is refused: headlab never
unpickles. Every error names the file and what is wrong.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch
from safetensors import SafetensorError, safe_open

from headlab.models.bpe import tokenizer_from_file, tokenizer_from_gguf
from headlab.models.decoder import Decoder
from headlab.models.gguf import read_gguf
from headlab.models.llama import LlamaDecoder
from headlab.models.llama_config import checked, from_gguf_metadata, read_hf_config
from headlab.models.llama_weights import gguf_state, hf_state, load_state


def load_gguf(path: str | Path, name: str | None = None) -> Decoder:
    """A Decoder from a llama-architecture GGUF (weights dequantised to float32)."""
    path = Path(path)
    file = read_gguf(path)
    config = from_gguf_metadata(file.metadata, path)
    if "output.weight" in file.tensors:
        config = type(config)(**{**config.__dict__, "tie_word_embeddings": False})
    config = checked(config, path)
    model = LlamaDecoder(config)
    load_state(model, gguf_state(file.tensors, config, path), path)
    tokenizer = tokenizer_from_gguf(file.metadata, path)
    name = name or str(file.metadata.get("general.name") or path.stem)
    template = file.metadata.get("tokenizer.chat_template")
    return Decoder(name, model, tokenizer, template if isinstance(template, str) else None)


def _read_safetensors(folder: Path) -> dict[str, torch.Tensor]:
    files = sorted(folder.glob("*.safetensors"))
    if not files:
        pickles = sorted(p.name for p in folder.glob("*.bin"))
        found = (
            f" (found {', '.join(pickles)}: pickle, which headlab does not load)" if pickles else ""
        )
        raise ValueError(f"{folder}: no *.safetensors weights{found}")
    tensors: dict[str, torch.Tensor] = {}
    for file in files:
        try:
            with safe_open(str(file), framework="pt") as handle:
                for key in handle.keys():  # noqa: SIM118 (safe_open is not a mapping)
                    tensors[key] = handle.get_tensor(key)
        except (SafetensorError, OSError) as error:
            raise ValueError(f"{file}: not a readable safetensors file ({error})") from None
    return tensors


def load_hf_folder(folder: str | Path) -> Decoder:
    """A Decoder from a Hugging Face folder of the Llama family."""
    folder = Path(folder)
    for name in ("config.json", "tokenizer.json"):
        if not (folder / name).is_file():
            raise FileNotFoundError(f"model folder {folder}: {name} is missing")
    config = read_hf_config(folder / "config.json")
    model = LlamaDecoder(config)
    load_state(model, hf_state(_read_safetensors(folder), config, folder), folder)
    tokenizer = tokenizer_from_file(folder / "tokenizer.json")
    return Decoder(folder.name, model, tokenizer, _chat_template(folder))


def _chat_template(folder: Path) -> str | None:
    """The chat template of ``tokenizer_config.json`` (or ``chat_template.jinja``), if any."""
    jinja = folder / "chat_template.jinja"
    if jinja.is_file():
        return jinja.read_text(encoding="utf-8")
    config = folder / "tokenizer_config.json"
    try:
        template = json.loads(config.read_text(encoding="utf-8")).get("chat_template")
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, AttributeError):
        return None
    return template if isinstance(template, str) else None
