"""Trained models behind ``HeadModel``: ``load`` gives every one through the one production
route (transformers with headlab's attention, ``models/hf/``); the hand-built BERT encoder and
Llama decoder (``models/handbuilt/``) are short references checked against it; the corpora."""

from headlab.attention.pruned import NoHeads
from headlab.models.corpus import default_corpus, long_document, read_corpus
from headlab.models.interface import AttentionLayer, HeadModel, LanguageModel, TokenBatch
from headlab.models.load import MODEL_NAMES, load
from headlab.models.packaged import default_model_dir
from headlab.models.pooling import PoolingConfig
from headlab.models.synthetic import write_random_bert

__all__ = [
    "MODEL_NAMES",
    "AttentionLayer",
    "HeadModel",
    "LanguageModel",
    "NoHeads",
    "PoolingConfig",
    "TokenBatch",
    "default_corpus",
    "default_model_dir",
    "load",
    "long_document",
    "read_corpus",
    "write_random_bert",
]
