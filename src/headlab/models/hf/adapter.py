"""``TransformersModel``: any transformers model on headlab's attention, behind the model interface.

One adapter for every family: it reads sizes from what transformers passes to the attention
function (probe.py), and calls the model as transformers does; the family's own code
(embeddings, rotary, norms, experts, caches) runs untouched, and every attention call goes to
headlab's function (attention.py), which applies what each module's ``HFAttentionLayer`` holds
(sites, this forward's head mask, a head view).

tokenize(texts) -> TokenBatch (padded on the right, the tokenizer's own special tokens)
run(batch, head_mask) -> (batch, pos, vocab) logits for a causal model, (batch, hidden) pooled
              embeddings (mean over real tokens, or the folder's sentence-transformers pooling)
              otherwise; with autograd to head_mask
run_rows(batch, head_mask) -> a causal model's logits a block of positions at a time
generate(text, n) -> greedy new ids, with the model's own KV cache (``model.generate``); the
              layers' interventions act in every decoding step
attention_layers() -> one HFAttentionLayer per attention module, kept on the module
streams(), blocks(), run_blocks(...), unembed(states) -> the run protocol
              (``models/run_protocol.py``; block_run.py)
trace_batch(batch) -> (output, one AttentionTrace per layer), every site recorded
with_head_view / without_heads / with_query_key_weights -> variants sharing every module they do
              not change (variants.py, with tree.py and edits.py)

Attaching twice to the same ``PreTrainedModel`` gives two handles on the same layers: the layers
live on the model's modules, so an intervention set through one handle acts in the other. A
variant (``with_head_view`` ...) has its own modules and sites where it differs.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from contextlib import ExitStack, contextmanager

import torch
from torch import Tensor

from headlab.attention.functional import merge_heads
from headlab.attention.interventions import SITES, record
from headlab.attention.trace import AttentionTrace
from headlab.limits import check_int, check_prompt
from headlab.models.hf import block_logits, edits, variants
from headlab.models.hf.block_logits import HFOutputRows, body_states
from headlab.models.hf.block_run import BlockRoute
from headlab.models.hf.hybrid import layer_note
from headlab.models.hf.layer import (
    HFAttentionLayer,
    keep_all,
    model_layers,
)
from headlab.models.hf.probe import probe
from headlab.models.hf.runnable import model_family
from headlab.models.interface import HeadMask, ObjectiveKind, TokenBatch, layer_masks
from headlab.models.objectives import contrastive_objective
from headlab.models.pooling import PoolingConfig, pool
from headlab.models.special import added_around, position_names, positions


def objective_kind(causal: bool) -> ObjectiveKind:
    """What a transformers-route model is judged by: a causal one has a language-model head
    (``AutoModelForCausalLM``), an encoder gives pooled sentence embeddings."""
    return "next-token" if causal else "contrastive"


class TransformersModel(BlockRoute):
    """A transformers ``PreTrainedModel`` (attention on headlab) and its tokenizer.

    ``layers``: the model's HFAttentionLayers (a variant passes its own); by default those kept
    on the model, found by one short observed forward the first time.
    """

    def __init__(
        self,
        name: str,
        model: torch.nn.Module,
        tokenizer=None,
        causal: bool = True,
        pooling: PoolingConfig | None = None,
        layers: list[HFAttentionLayer] | None = None,
    ) -> None:
        self.name = name
        self.model = model.eval()
        self.tokenizer = tokenizer
        self.causal = causal
        self.objective_kind = objective_kind(causal)
        self.config = model.config.get_text_config()
        self.family = model_family(model)
        self.pooling = pooling or PoolingConfig(max_seq_length=self.max_positions)
        if layers is None:
            layers = model_layers(model) or keep_all(model, probe(model, self.family))
        self.layers = layers
        self.first_token, self.last_token = self._position_names()

    # ------------------------------------------------------------------ sizes
    @property
    def num_layers(self) -> int:
        return len(self.layers)

    @property
    def heads_per_layer(self) -> list[int]:
        return [layer.num_heads for layer in self.layers]

    @property
    def kv_heads_per_layer(self) -> list[int]:
        return [layer.num_kv_heads for layer in self.layers]

    @property
    def max_positions(self) -> int:
        from headlab.models.hf.config_fields import max_positions_of

        return max_positions_of(self.config)

    @property
    def output_width(self) -> int:
        return int(self.config.vocab_size if self.causal else self.config.hidden_size)

    def parameters(self):
        return self.model.parameters()

    def parameter_count(self) -> int:
        """Distinct parameters (tied weights once), K/V rows copied by pruning once."""
        total = sum(p.numel() for p in {id(p): p for p in self.parameters()}.values())
        return total - sum(layer.copied_parameters for layer in self.layers)

    def attention_layers(self) -> list[HFAttentionLayer]:
        return self.layers

    def layer_notes(self) -> list[str]:
        """A hybrid's blocks without heads, in one line (hybrid.py); none for other models."""
        note = layer_note(self.model, self.layers)
        return [] if note is None else [note]

    # ------------------------------------------------------------------ tokens
    #: what to do when there is no tokenizer; a loaded checkpoint names its folder instead
    no_tokenizer = "pass tokenizer= to headlab.attach"

    def _need_tokenizer(self):
        if self.tokenizer is None:
            raise ValueError(f"{self.name} has no tokenizer: {self.no_tokenizer}")
        return self.tokenizer

    def encode(self, text: str) -> list[int]:
        """Token ids of ``text`` with the tokenizer's own special tokens."""
        # verbose=False: no warning that the text is longer than the model's positions (counting
        # a long text's tokens is what the caller wants)
        return list(self._need_tokenizer()(text, verbose=False)["input_ids"])

    def count_tokens(self, text: str) -> int:
        return len(self.encode(text))

    def decode(self, ids: list[int], skip_special: bool = False) -> str:
        return self._need_tokenizer().decode(ids, skip_special_tokens=skip_special)

    def _pad_id(self) -> int:
        tokenizer = self.tokenizer
        for candidate in (tokenizer.pad_token_id, tokenizer.eos_token_id):
            if candidate is not None:
                return int(candidate)
        return 0

    def _position_names(self) -> tuple[str, str | None]:
        """``models.special``'s names, from what the tokenizer adds around a text."""
        if self.tokenizer is None:
            return "first", None
        with_special = self.tokenizer("a")["input_ids"]
        plain = self.tokenizer("a", add_special_tokens=False)["input_ids"]
        prefix, suffix = added_around(with_special, plain)
        convert = self.tokenizer.convert_ids_to_tokens
        return position_names(convert(prefix), convert(suffix))

    def tokenize(self, texts: list[str], max_length: int | None = None) -> TokenBatch:
        """Texts cut to ``max_length`` tokens by the tokenizer itself (its special tokens kept,
        [SEP] last), padded on the right. Default: the model's positions; an encoder's
        ``max_seq_length`` (sentence-transformers' cut, as headlab's own encoder)."""
        tokenizer = self._need_tokenizer()
        if not texts:
            raise ValueError("texts must hold at least one text, got none")
        default = self.max_positions if self.causal else self.pooling.max_seq_length
        limit = default if max_length is None else max_length
        if not self.causal and isinstance(limit, int):  # an encoder cuts at its positions
            limit = min(limit, self.max_positions)
        # the tokenizer's own tokens around a text; a cut to only those (BERT's [CLS] [SEP] at
        # max_length 2) is allowed, as sentence-transformers allows it
        added = (self.first_token != "first") + (self.last_token is not None)
        check_int("max_length", limit, low=max(added, 1), high=self.max_positions)
        fast = getattr(tokenizer, "is_fast", False)
        encodings = [
            tokenizer(t, truncation=True, max_length=limit, return_offsets_mapping=fast)
            for t in texts
        ]
        lengths = [len(e["input_ids"]) for e in encodings]
        if min(lengths) == 0:
            raise ValueError("every text must have at least one token, got an empty text")
        ids = torch.full((len(texts), max(lengths)), self._pad_id(), dtype=torch.long)
        mask = torch.zeros(ids.shape, dtype=torch.bool)
        tokens = []
        for row, (text, e, n) in enumerate(zip(texts, encodings, lengths, strict=True)):
            ids[row, :n] = torch.tensor(e["input_ids"])
            mask[row, :n] = True
            if fast:  # the text under each token; a special token (no text) by its name
                names = tokenizer.convert_ids_to_tokens(e["input_ids"])
                pieces = zip(e["offset_mapping"], names, strict=True)
                tokens.append([text[a:b] if b > a else name for (a, b), name in pieces])
            else:
                tokens.append(tokenizer.convert_ids_to_tokens(e["input_ids"]))
        return TokenBatch(input_ids=ids, attention_mask=mask, tokens=tokens)

    # ------------------------------------------------------------------ running
    def _outputs(self, input_ids: Tensor, attention_mask: Tensor) -> Tensor:
        """The model's own output: (batch, pos, vocab) logits, or (batch, pos, hidden) states."""
        if self.causal:  # no cache: an analysis reads each text once
            out = self.model(input_ids=input_ids, attention_mask=attention_mask, use_cache=False)
            return out.logits
        return self.model(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state

    @contextmanager
    def _head_masks(self, head_mask: HeadMask):
        """Within the block, each layer's attention scales its heads by its entry of
        ``head_mask`` (``layer_masks``): the registered function reads it from the layer."""
        masks = layer_masks(head_mask, self.num_layers)
        try:
            for layer, mask in zip(self.layers, masks, strict=True):
                layer.head_mask = mask
            yield
        finally:
            for layer in self.layers:
                layer.head_mask = None

    def run(self, batch: TokenBatch, head_mask: HeadMask = None) -> Tensor:
        with self._head_masks(head_mask):
            out = self._outputs(batch.input_ids, batch.attention_mask.long())
        if self.causal:
            return out  # (batch, pos, vocab)
        return pool(out, batch.attention_mask, self.pooling)  # (batch, hidden)

    def embed(
        self,
        texts: list[str],
        batch_size: int = 32,
        *,
        max_length: int | None = None,
        head_mask: HeadMask = None,
    ) -> Tensor:
        """(n_texts, hidden) sentence embeddings of an encoder, as sentence-transformers' ``encode``
        gives them: texts batched longest first (little padding computed), rows returned in the
        order of ``texts``."""
        if self.causal:
            raise ValueError(f"{self.name} is a language model: embed is for encoders")
        if not isinstance(batch_size, int) or isinstance(batch_size, bool) or batch_size < 1:
            raise ValueError(f"batch_size must be an integer >= 1, got {batch_size!r}")
        order = sorted(range(len(texts)), key=lambda i: -len(texts[i]))
        parts = []
        with torch.inference_mode():
            for start in range(0, len(texts), batch_size):
                rows = order[start : start + batch_size]
                batch = self.tokenize([texts[i] for i in rows], max_length)
                parts.append(self.run(batch, head_mask))  # (batch, hidden)
        if not parts:
            return torch.zeros(0, int(self.config.hidden_size))
        inverse = torch.empty(len(order), dtype=torch.long)
        inverse[torch.tensor(order)] = torch.arange(len(order))
        return torch.cat(parts)[inverse]

    def run_rows(self, batch: TokenBatch, head_mask: HeadMask = None) -> HFOutputRows:
        """A causal model's body run once on ``batch``; its logits a block of positions at a
        time (``models.output_rows``), never the (batch, pos, vocab) whole."""
        if not self.causal:
            raise ValueError(f"{self.name} is not a language model (its attention is not causal)")
        with self._head_masks(head_mask):
            states = body_states(self.model, batch.input_ids, batch.attention_mask.long())
        return HFOutputRows(self.model, states)

    def logits(self, input_ids: Tensor, attention_mask: Tensor | None = None) -> Tensor:
        """(batch, pos) ids -> (batch, pos, vocab) next-token logits (no autograd)."""
        if not self.causal:
            raise ValueError(f"{self.name} is not a language model (its attention is not causal)")
        with torch.no_grad():
            return self.model(input_ids=input_ids, attention_mask=attention_mask).logits

    def objective(
        self, texts: list[str], head_mask: HeadMask = None, max_length: int | None = None
    ) -> Tensor:
        """A language model's mean next-token cross-entropy over real tokens; an encoder's
        in-batch InfoNCE between the halves of each text (``models.objectives``)."""
        if not self.causal:
            return contrastive_objective(self, texts, head_mask, max_length=max_length or 128)
        batch = self.tokenize(texts, max_length)  # the logits a block of positions at a time
        return block_logits.next_token_loss(self.run_rows(batch, head_mask), batch)

    def special_positions(self, batch: TokenBatch) -> dict[str, Tensor]:
        """The first token and, where the tokenizer appends one, the last special token, named
        by ``models.special`` (BERT: "cls", "sep"; SmolLM2: "first")."""
        return positions(batch, self.first_token, self.last_token)

    def trace_batch(
        self, batch: TokenBatch, head_mask: HeadMask = None
    ) -> tuple[Tensor, list[AttentionTrace]]:
        """(``run``'s output, one AttentionTrace per layer): every site recorded in one forward
        (the kernel's explicit path); contributions and output through the layer's W_O (the
        output projection's own forward, bias included). No autograd."""
        with ExitStack() as stack, torch.no_grad():
            recordings = [stack.enter_context(record(layer, SITES)) for layer in self.layers]
            output = self.run(batch, head_mask)
        traces = []
        for layer, recording in zip(self.layers, recordings, strict=True):
            if isinstance(layer.module, edits.NoHeads):  # every head removed: nothing recorded
                traces.append(edits.no_heads_trace(layer, *batch.input_ids.shape))
                continue
            if layer.output is None:
                raise ValueError(f"layer {layer.path} has no output projection to trace through")
            head_out = recording["head_outputs"]  # (batch, head, q_pos, d_head)
            _, heads, _, d = head_out.shape
            w_o = layer.output_weight().view(-1, heads, d)  # (embed, head, d_head)
            with torch.no_grad():
                projected = layer.output.module(merge_heads(head_out))  # (batch, q_pos, embed)
            traces.append(
                AttentionTrace(
                    q=recording["q"],
                    k=recording["k"],
                    v=recording["v"],
                    scores=recording["scores"],
                    weights=recording["weights"],
                    head_outputs=head_out,
                    contributions=torch.einsum("bhqd,ehd->bhqe", head_out, w_o),
                    output=projected,
                )
            )
        return output, traces

    # ------------------------------------------------------------------ variants (variants.py)
    def with_head_view(self, num_heads: int, layers: Sequence[int] | None = None):
        """The same weights with the attention of ``layers`` (default: all) viewed as
        ``num_heads`` heads, inside the attention function (``kernel.attend``'s head view)."""
        return variants.with_head_view(self, num_heads, layers)

    def without_heads(self, heads: Mapping[int, Iterable[int]]):
        """The model without the given heads, removed from its weights (edits.py: the common
        layout of one projection per role; ValueError naming the family otherwise). Checked
        against masking the same heads on a short input before it is returned."""
        return variants.without_heads(self, heads)

    def with_query_key_weights(self, weights: Mapping[int, tuple[Tensor, Tensor]]):
        """The model with layer i's W_Q and W_K (``HFAttentionLayer.query_key_weights``) replaced
        by ``weights[i]``, wherever the projections hold them (fused ones too)."""
        return variants.with_query_key_weights(self, weights)

    # ------------------------------------------------------------------ generation
    def chat_prompt(self, text: str) -> str:
        """``text`` as one user turn of the tokenizer's chat template (unchanged without one)."""
        tokenizer = self._need_tokenizer()
        if not getattr(tokenizer, "chat_template", None):
            return text
        turn = [{"role": "user", "content": text}]
        return tokenizer.apply_chat_template(turn, tokenize=False, add_generation_prompt=True)

    def generate(
        self, text: str, max_new_tokens: int = 32, on_token: Callable[[int], None] | None = None
    ) -> list[int]:
        """Greedy continuation of ``text``: up to ``max_new_tokens`` new ids, with the model's own
        KV cache; ``on_token(n)`` after the n-th new token."""
        if not self.causal:
            raise ValueError(f"{self.name} is not a language model (its attention is not causal)")
        check_int("max_new_tokens", max_new_tokens, low=1, high=self.max_positions)
        ids = self.encode(text)
        check_prompt(len(ids), max_new_tokens, self.max_positions)
        with torch.no_grad():
            out = self.model.generate(
                torch.tensor([ids]),
                attention_mask=torch.ones(1, len(ids), dtype=torch.long),
                max_new_tokens=max_new_tokens,
                do_sample=False,
                pad_token_id=self._pad_id(),
                streamer=None if on_token is None else _Counter(on_token),
            )
        return out[0, len(ids) :].tolist()


class _Counter:
    """A transformers streamer that only counts new tokens (the first ``put`` is the prompt)."""

    def __init__(self, on_token: Callable[[int], None]) -> None:
        self.on_token, self.seen, self.prompt = on_token, 0, True

    def put(self, value: Tensor) -> None:
        if self.prompt:
            self.prompt = False
            return
        self.seen += 1
        self.on_token(self.seen)

    def end(self) -> None:
        pass
