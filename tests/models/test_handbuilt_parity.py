"""The hand-built references (``headlab.models.handbuilt``) against transformers and the route,
in the way minGPT checks its GPT against Hugging Face's GPT-2.

Three implementations that must agree: transformers' own model with eager attention, the
production route (the same transformers model on headlab's registered attention, ``attach`` /
``load``) and the hand-built plain-torch forward reading that model's ``state_dict``. Tiny
random models that transformers builds (distinct sizes, right-padded batches) in float64; the
packaged MiniLM in float64 and SmolLM2 (its converted safetensors) in float32 (marker ``model``).

Tolerances: BERT computes everything in the weights' dtype, so float64 agrees to rounding with
both. transformers' Llama takes its softmax in float32 (eager), so the eager comparison is at
float32's precision; headlab's kernel takes it in float64, so the route agrees to rounding.
"""

from __future__ import annotations

import pytest
import torch
import transformers

from headlab.models.handbuilt import bert_forward, llama_forward
from headlab.models.hf import attach, load_transformers
from headlab.models.interface import TokenBatch

F64 = {"rtol": 0, "atol": 1e-11}


def batch_of(ids: torch.Tensor, mask: torch.Tensor) -> TokenBatch:
    return TokenBatch(ids, mask.bool(), [[] for _ in range(ids.shape[0])])


def right_padded(vocab: int, lengths: list[int], seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(batch, pos) random ids and their mask (1 on real tokens, padding on the right)."""
    gen = torch.Generator().manual_seed(seed)
    ids = torch.randint(1, vocab, (len(lengths), max(lengths)), generator=gen)
    mask = (torch.arange(max(lengths))[None] < torch.tensor(lengths)[:, None]).long()
    return ids * mask, mask


def route_traces(route, ids, mask) -> tuple[torch.Tensor, list[torch.Tensor]]:
    """(the route's model output, each layer's weights (batch, head, q_pos, k_pos))."""
    with torch.no_grad():
        out = route.model(input_ids=ids, attention_mask=mask)
        _, traces = route.trace_batch(batch_of(ids, mask))
    result = out.logits if hasattr(out, "logits") else out.last_hidden_state
    return result, [t.weights for t in traces]


def eager_outputs(model, ids, mask) -> tuple[torch.Tensor, tuple[torch.Tensor, ...]]:
    with torch.no_grad():
        out = model(input_ids=ids, attention_mask=mask, output_attentions=True)
    result = out.logits if hasattr(out, "logits") else out.last_hidden_state
    return result, out.attentions


def twins(cls, config, seed: int):
    """Two float64 copies of one random model: eager attention, and on the route (attach)."""
    torch.manual_seed(seed)
    eager = cls(config).to(torch.float64).eval()
    eager.set_attn_implementation("eager")
    copy = cls(config).to(torch.float64).eval()
    copy.load_state_dict(eager.state_dict())
    return eager, attach(copy)


def assert_all_close(ours, theirs, mask, **tolerance) -> None:
    """Lists of per-layer weights equal on real queries (padded rows are nobody's output)."""
    assert len(ours) == len(theirs)
    real = mask.bool()[:, None, :, None]  # (batch, 1, q_pos, 1)
    for a, b in zip(ours, theirs, strict=True):
        assert a.shape == b.shape
        torch.testing.assert_close(a * real, b * real, **tolerance)


@pytest.mark.parametrize("hidden_act", ["gelu", "relu"])
def test_bert_equals_transformers_and_the_route_in_float64(hidden_act):
    config = transformers.BertConfig(
        vocab_size=31,
        hidden_size=15,
        num_hidden_layers=2,
        num_attention_heads=3,
        intermediate_size=23,
        max_position_embeddings=37,
        type_vocab_size=2,
        hidden_act=hidden_act,
        hidden_dropout_prob=0.0,
        attention_probs_dropout_prob=0.0,
    )
    eager, route = twins(transformers.BertModel, config, seed=5)
    ids, mask = right_padded(31, [11, 7, 2], seed=7)
    types = (torch.arange(11) >= 5).long().expand(3, -1)
    ours = bert_forward(eager.state_dict(), config, ids, mask, types)
    with torch.no_grad():
        out = eager(
            input_ids=ids, attention_mask=mask, token_type_ids=types, output_attentions=True
        )
    real = mask.bool()[..., None]
    torch.testing.assert_close(ours.hidden_states * real, out.last_hidden_state * real, **F64)
    assert_all_close(ours.attentions, out.attentions, mask, **F64)
    plain = bert_forward(eager.state_dict(), config, ids, mask)  # token types 0, as the route
    hidden, weights = route_traces(route, ids, mask)
    torch.testing.assert_close(plain.hidden_states * real, hidden * real, **F64)
    assert_all_close(plain.attentions, weights, mask, **F64)
    # rows sum to one, and padded keys get no weight
    ones = torch.ones(3, 3, 11, dtype=torch.float64)
    torch.testing.assert_close(ours.attentions[0].sum(-1), ones)
    assert (ours.attentions[1][2, :, :, 2:] == 0).all()


@pytest.mark.parametrize(("tied", "bias"), [(False, False), (True, True)])
def test_llama_equals_transformers_and_the_route_in_float64(tied, bias):
    """6 query heads of 10 on 2 K/V heads (groups of 3) in a width of 42; tied embeddings with
    q/k/v/o biases (Qwen2-like) as the second case."""
    config = transformers.LlamaConfig(
        vocab_size=53,
        hidden_size=42,
        num_attention_heads=6,
        num_key_value_heads=2,
        head_dim=10,
        intermediate_size=37,
        num_hidden_layers=3,
        max_position_embeddings=64,
        rope_theta=500.0,
        tie_word_embeddings=tied,
        attention_bias=bias,
        rms_norm_eps=1e-5,
    )
    eager, route = twins(transformers.LlamaForCausalLM, config, seed=13)
    if bias:  # transformers starts biases at 0; unusual values so that a dropped bias shows
        with torch.no_grad():
            for name, p in eager.named_parameters():
                if name.endswith("bias"):
                    p.normal_(0, 0.5)
        route.model.load_state_dict(eager.state_dict())
    ids, mask = right_padded(53, [17, 9, 4], seed=3)
    state = eager.state_dict()
    if tied:
        state = {k: v for k, v in state.items() if k != "lm_head.weight"}
    ours = llama_forward(state, config, ids, mask)
    real = mask.bool()[..., None]
    logits, weights = eager_outputs(eager, ids, mask)
    span = float(logits.abs().max())
    torch.testing.assert_close(ours.logits * real, logits * real, rtol=0, atol=1e-6 * span)
    assert_all_close(ours.attentions, weights, mask, rtol=0, atol=1e-6)
    logits, weights = route_traces(route, ids, mask)
    torch.testing.assert_close(ours.logits * real, logits * real, **F64)
    assert_all_close(ours.attentions, weights, mask, **F64)
    assert (ours.attentions[0][0].triu(1) == 0).all()  # causal: no weight on later keys


def test_unsupported_settings_are_named():
    bert = transformers.BertConfig(hidden_act="swish")
    with pytest.raises(ValueError, match=r"hidden_act must be one of .*got 'swish'"):
        bert_forward({}, bert, torch.zeros(1, 2, dtype=torch.long))
    llama = transformers.LlamaConfig(
        rope_parameters={"rope_type": "linear", "rope_theta": 1e4, "factor": 2.0}
    )
    with pytest.raises(ValueError, match="rope_type must be 'default', got 'linear'"):
        llama_forward({}, llama, torch.zeros(1, 2, dtype=torch.long))


TEXTS = [
    "The quick brown fox jumps over the lazy dog.",
    "Ünïcödé text: naïve café, 日本語, emoji 🙂.",
    "short",
]


@pytest.mark.model
def test_minilm_equals_transformers_and_the_route_in_float64():
    from headlab.models import default_model_dir

    folder = default_model_dir()
    route = load_transformers(folder, dtype=torch.float64)
    eager = transformers.AutoModel.from_pretrained(
        str(folder), attn_implementation="eager", dtype=torch.float64
    ).eval()
    batch = route.tokenize(TEXTS)
    ids, mask = batch.input_ids, batch.attention_mask.long()
    ours = bert_forward(route.model.state_dict(), route.model.config, ids, mask)
    real = mask.bool()[..., None]
    for hidden, weights in (eager_outputs(eager, ids, mask), route_traces(route, ids, mask)):
        torch.testing.assert_close(ours.hidden_states * real, hidden * real, **F64)
        assert_all_close(ours.attentions, weights, mask, **F64)


@pytest.mark.model
def test_smollm2_equals_the_route(smollm2):
    """The packaged SmolLM2 (its converted safetensors, float32): logits and every layer's
    weights of the hand-built decoder on the route's own state_dict."""
    batch = smollm2.tokenize([TEXTS[0], "def f(x):\n    return x ** 2"])
    ids, mask = batch.input_ids, batch.attention_mask.long()
    with torch.no_grad():
        ours = llama_forward(smollm2.model.state_dict(), smollm2.model.config, ids, mask)
    logits, weights = route_traces(smollm2, ids, mask)
    real = mask.bool()[..., None]
    span = float(logits.max() - logits.min())
    torch.testing.assert_close(ours.logits * real, logits * real, rtol=0, atol=1e-4 * span)
    assert_all_close(ours.attentions, weights, mask, rtol=0, atol=2e-5)
