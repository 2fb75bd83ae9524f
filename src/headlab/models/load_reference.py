"""The hand-built reference models from transformers checkpoint folders: ``load_encoder`` (BERT)
and ``load_decoder`` (the Llama family). They are not a route: ``load`` runs every model through
transformers; these are the readable implementations the tests check that route against."""

from __future__ import annotations

from pathlib import Path

from headlab.models.config import check_model_dir, read_bert_config, read_pooling_config
from headlab.models.encoder import BertEncoder
from headlab.models.load_decoder import load_hf_folder as load_decoder
from headlab.models.packaged import MINILM_NAME, default_model_dir
from headlab.models.pipeline import Encoder
from headlab.models.tokenizer import TextTokenizer
from headlab.models.weights import read_bert_tensors, to_headlab_state

__all__ = ["load_decoder", "load_encoder"]


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
    tokenizer = TextTokenizer(path / "tokenizer.json", config.pad_token_id, config.vocab_size)
    tensors = read_bert_tensors(path / "model.safetensors", config)
    model = BertEncoder(config)
    model.load_state_dict(to_headlab_state(tensors, config), strict=True)
    name = path.name if model_dir is not None else MINILM_NAME
    return Encoder(model, tokenizer, pooling, name)
