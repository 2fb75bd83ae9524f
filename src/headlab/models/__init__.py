"""Models built from headlab's MultiHeadAttention (a BERT encoder, Llama-family decoders), their
loading, tokenising and corpora; ``load`` gives any of them behind ``HeadModel``."""

from headlab.attention.pruned import NoHeads
from headlab.models.config import BertConfig, PoolingConfig
from headlab.models.corpus import default_corpus, long_document, read_corpus
from headlab.models.decoder import Decoder
from headlab.models.encoder import BertEncoder, BertLayer
from headlab.models.interface import AttentionLayer, HeadModel, LanguageModel, TokenBatch
from headlab.models.load import MODEL_NAMES, default_model_dir, load, load_encoder
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
