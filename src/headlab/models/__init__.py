"""Encoders built from headlab's MultiHeadAttention: loading BERT models, tokenising, corpora."""

from headlab.models.config import BertConfig, PoolingConfig
from headlab.models.corpus import default_corpus, read_corpus
from headlab.models.encoder import BertEncoder, BertLayer, NoHeads
from headlab.models.load import default_model_dir, load_encoder
from headlab.models.pipeline import Encoder, EncoderTrace
from headlab.models.synthetic import write_random_bert

__all__ = [
    "BertConfig",
    "BertEncoder",
    "BertLayer",
    "Encoder",
    "EncoderTrace",
    "NoHeads",
    "PoolingConfig",
    "default_corpus",
    "default_model_dir",
    "load_encoder",
    "read_corpus",
    "write_random_bert",
]
