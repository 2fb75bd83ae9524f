"""The hand-built BERT encoder and Llama decoder: short, readable references in plain torch.

Each takes a transformers ``state_dict`` and config and computes what the model computes, one
screen of math per model (``bert.py``, ``llama.py``, over the one ``attention`` function of
``dot_product_attention.py``). They run no analysis and are no production route: every
trained model runs as a transformers model on headlab's attention (``headlab.models.load``).
They are what that route is checked against, as minGPT checks its GPT against Hugging Face's
GPT-2 (tests/models/test_handbuilt_parity.py: equal to transformers' eager attention and to
the route, in float64 on tiny random models and MiniLM, in float32 on SmolLM2).

Not named ``reference``: ``headlab.reference`` is the NumPy math of attention itself.
"""

from headlab.models.handbuilt.bert import BertOutput, bert_forward
from headlab.models.handbuilt.dot_product_attention import attention
from headlab.models.handbuilt.llama import LlamaOutput, llama_forward

__all__ = ["BertOutput", "LlamaOutput", "attention", "bert_forward", "llama_forward"]
