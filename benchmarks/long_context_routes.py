"""What each route of bench_long_context.py runs, and on which model.

Models (``MODELS``): ``smollm2`` (the packaged GGUF), ``smollm2-random`` (SmolLM2-135M's shapes with
random weights: the device machine cannot take the GGUF) and ``random-llama`` (a 4-layer
Llama-family config with 32768 positions, built by transformers with random weights). Every
model runs on the one route: transformers' model class on headlab's registered attention
(``headlab.models.load("smollm2")``, ``headlab.attach`` for the random ones); the routes ``sdpa``
and ``sdpa-body`` run the same model on transformers' own SDPA, the baseline. (The hand-built
decoder that was a second backend is a reference now, measured by ``bench_decoder.py``.)

``route_runs(route, spec)`` builds only what ``route`` needs (one model per process), and returns
(fn, batch, warm batch): the measured call is ``fn(batch)`` after ``fn(warm)``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

# SmolLM2-135M's sizes (config of HuggingFaceTB/SmolLM2-135M-Instruct).
SMOLLM2 = {
    "vocab_size": 49152,
    "hidden_size": 576,
    "num_hidden_layers": 30,
    "num_attention_heads": 9,
    "num_key_value_heads": 3,
    "head_dim": 64,
    "intermediate_size": 1536,
    "max_position_embeddings": 8192,
    "rope_theta": 100000.0,
    "rms_norm_eps": 1e-5,
    "tie_word_embeddings": True,
}
# SmolLM2's widths, 4 layers, 32768 positions. The vocabulary is cut to 8192 so that the logits
# (32768 x 8192 x 4 bytes = 1 GiB, in every route) do not hide the attention's memory: with
# SmolLM2's 49152 they alone would be 6 GiB.
RANDOM_LLAMA = {
    **SMOLLM2,
    "num_hidden_layers": 4,
    "max_position_embeddings": 32768,
    "vocab_size": 8192,
}
MODELS = {"smollm2": SMOLLM2, "smollm2-random": SMOLLM2, "random-llama": RANDOM_LLAMA}
#: Routes of a model behind headlab's interface; "sdpa" is transformers' own SDPA forward.
MODEL_ROUTES = ("forward", "streaming", "roles", "heads", "plan", "materialised")
#: transformers' own SDPA: "sdpa" the whole forward, "sdpa-body" its body without the logits.
SDPA_ROUTES = ("sdpa", "sdpa-body")


@dataclass(frozen=True)
class Spec:
    """Which model and device a child runs; chunk_elements for the statistics."""

    model: str = "smollm2"
    device: str = "cpu"
    chunk_elements: int = 2**22


def model_routes(model, chunk_elements: int) -> dict[str, Callable]:
    """route -> fn(batch) for any model behind ``HeadModel``."""
    from headlab.heads.model_head_sums import model_head_sums
    from headlab.heads.tracing import attention_weights

    def roles(b):
        from headlab.heads.attention_maps import block_size
        from headlab.heads.repeats import copy_sources

        n = b.input_ids.shape[1]
        sources = copy_sources(b.input_ids[0].cpu())[None].to(b.input_ids.device)
        return model_head_sums(
            model,
            b,
            chunk_elements=chunk_elements,
            window=(4, 256),
            copy_sources=sources,
            block=block_size(n),
        )

    def heads(b):  # what `model heads` runs: the roles' pass, its logits a block at a time
        from headlab.heads.attention_maps import block_size
        from headlab.heads.repeats import copy_sources
        from headlab.models.output_rows import next_token_scores

        n = b.input_ids.shape[1]
        sources = copy_sources(b.input_ids[0].cpu())[None].to(b.input_ids.device)
        output, sums = model_head_sums(
            model,
            b,
            chunk_elements=chunk_elements,
            window=(4, 256),
            copy_sources=sources,
            block=block_size(n),
            logits_by_rows=True,
        )
        return next_token_scores(output, b.input_ids), sums

    def plan(b):
        from headlab.heads.kv_budget import KVPlan, planned

        groups = [
            (layer, g) for layer, kv in enumerate(model.kv_heads_per_layer) for g in range(kv)
        ][::2]
        with planned(model, KVPlan(tuple(groups), 4, 256)):
            return model.run(b)

    return {
        "forward": lambda b: model.run(b),
        "streaming": lambda b: model_head_sums(model, b, chunk_elements=chunk_elements),
        "roles": roles,
        "heads": heads,
        "plan": plan,
        "materialised": lambda b: attention_weights(model, b),
    }


def random_batch(vocab_size: int, length: int, device: str):
    """A TokenBatch of ``length`` random ids (seeded: the same in every process)."""
    from headlab.models import TokenBatch

    ids = torch.randint(0, vocab_size, (1, length), generator=torch.Generator().manual_seed(1))
    return TokenBatch(ids.to(device), torch.ones_like(ids, dtype=torch.bool).to(device), [])


def text_batch(tokenizer, length: int, device: str):
    """The first ``length`` tokens of headlab's long document, by a transformers tokenizer (the
    ids that ``TransformersModel.tokenize`` gives)."""
    from headlab.models import TokenBatch, long_document

    ids = torch.tensor([tokenizer(long_document())["input_ids"][:length]])
    return TokenBatch(ids.to(device), torch.ones_like(ids, dtype=torch.bool).to(device), [])


def random_llama(config: dict, attn_implementation: str, seed: int = 0):
    """transformers' LlamaForCausalLM with ``config``'s sizes and its own random initialisation
    (seeded: the same weights in every process), in eval mode."""
    from transformers import AutoModelForCausalLM, LlamaConfig

    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(
        LlamaConfig(**config), attn_implementation=attn_implementation, dtype=torch.float32
    )
    return model.eval()


def transformers_gguf(gguf, attn_implementation: str):
    """(model, tokenizer): a GGUF file loaded by transformers alone (dequantised to float32),
    on ``attn_implementation`` ("sdpa", "eager"), in eval mode."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(
        str(gguf.parent),
        gguf_file=gguf.name,
        attn_implementation=attn_implementation,
        dtype=torch.float32,
    )
    tokenizer = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    return model.eval(), tokenizer


def _transformers(spec: Spec, sdpa: bool):
    """(a transformers model on its SDPA, or the same model behind headlab's interface on
    headlab's attention; batch(n))."""
    import headlab
    from headlab.models import load

    if spec.model == "smollm2":
        if sdpa:
            from headlab.models.packaged import packaged_smollm2

            model, tokenizer = transformers_gguf(packaged_smollm2(), "sdpa")
        else:
            model = load("smollm2")
            tokenizer = model.tokenizer
        return model, lambda n: text_batch(tokenizer, n, spec.device)
    config = MODELS[spec.model]
    model = random_llama(config, "sdpa")
    if not sdpa:
        model = headlab.attach(model, name=f"{spec.model} (transformers, random)")
    return model, lambda n: random_batch(config["vocab_size"], n, spec.device)


def route_runs(route: str, spec: Spec, length: int):
    """(fn, batch, warm batch) of ``route`` on ``spec``'s model at ``length`` tokens."""
    if route in SDPA_ROUTES:
        hf, batch = _transformers(spec, sdpa=True)
        hf.to(spec.device)
        run = hf if route == "sdpa" else hf.base_model

        def fn(b):
            out = run(input_ids=b.input_ids, attention_mask=b.attention_mask.long())
            return out.logits if route == "sdpa" else out.last_hidden_state

        return fn, batch(length), batch(64)
    model, batch = _transformers(spec, sdpa=False)
    model.model.to(spec.device)
    return model_routes(model, spec.chunk_elements)[route], batch(length), batch(64)


def bare_runs(length: int, device: str, chunk_elements: int):
    """One ``MultiHeadAttention`` (12 heads, embed 768): route -> fn(x), x, warm x."""
    from headlab import MultiHeadAttention
    from headlab.attention.module_statistics import attention_statistics

    mha = MultiHeadAttention(768, 12, batch_first=True, device=device).eval()
    x = torch.randn(1, length, 768, device=device)
    runs = {
        "forward": lambda x: mha(x, x, x, need_weights=False),
        "streaming": lambda x: attention_statistics(mha, x, chunk_elements=chunk_elements),
        "materialised": lambda x: mha.trace(x),
    }
    return runs, x, x[:, :64]


def materialised_bytes(model: str | None, length: int) -> int:
    """Every layer's full float32 weights at ``length`` tokens (None: the bare module)."""
    layers, heads = (
        (1, 12)
        if model is None
        else (MODELS[model]["num_hidden_layers"], MODELS[model]["num_attention_heads"])
    )
    return layers * heads * length**2 * 4
