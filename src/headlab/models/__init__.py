"""Trained models behind ``HeadModel``: ``load`` gives every one through the production route
(transformers with headlab's attention, ``models/hf/``); the hand-built BERT encoder and
Llama-family decoder are references checked against it (``load_encoder``, ``load_reference``);
the corpora."""

from headlab.attention.pruned import NoHeads
from headlab.models.config import BertConfig, PoolingConfig
from headlab.models.corpus import default_corpus, long_document, read_corpus
from headlab.models.decoder import Decoder
from headlab.models.encoder import BertEncoder, BertLayer
from headlab.models.interface import AttentionLayer, HeadModel, LanguageModel, TokenBatch
from headlab.models.load import MODEL_NAMES, load
from headlab.models.load_reference import load_encoder
from headlab.models.packaged import default_model_dir
from headlab.models.pipeline import Encoder, EncoderTrace
from headlab.models.synthetic import write_random_bert

__all__ = [
    "MODEL_NAMES",
    "AttentionLayer",
    "BertConfig",
    "BertEncoder",
    "BertLayer",
    "Decoder",
    "Encoder",
    "EncoderTrace",
    "HeadModel",
    "LanguageModel",
    "NoHeads",
    "PoolingConfig",
    "TokenBatch",
    "default_corpus",
    "default_model_dir",
    "load",
    "load_encoder",
    "long_document",
    "read_corpus",
    "write_random_bert",
]
