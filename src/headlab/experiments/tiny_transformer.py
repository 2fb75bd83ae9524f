"""A tiny pre-LayerNorm transformer built from ``headlab.MultiHeadAttention``.

embeddings (one table per token feature, summed) + learned positions -> L blocks of
[LN -> attention -> residual, LN -> MLP -> residual] -> LN -> readout. The readout reads the last
position (all outputs from there) or every position (output i from position i), so on "last"
tasks all information must flow through the last query's attention.
"""

from __future__ import annotations

from torch import Tensor, nn

from headlab.attention.functional import entropy
from headlab.attention.module import MultiHeadAttention
from headlab.attention.talking_heads import TalkingHeadsAttention
from headlab.experiments.sweep_tasks import TaskSpec, get_task
from headlab.results.run_config import RunConfig


class Block(nn.Module):
    def __init__(self, config: RunConfig) -> None:
        super().__init__()
        d = config.d_model
        self.ln1 = nn.LayerNorm(d)
        kind = TalkingHeadsAttention if config.attention == "talking-heads" else MultiHeadAttention
        self.attn = kind(
            d,
            config.num_heads,
            batch_first=True,
            head_dim=config.head_dim,
            num_kv_heads=config.num_kv_heads,
        )
        self.ln2 = nn.LayerNorm(d)
        self.mlp = nn.Sequential(
            nn.Linear(d, config.mlp_ratio * d), nn.GELU(), nn.Linear(config.mlp_ratio * d, d)
        )

    def forward(
        self, x: Tensor, *, causal: bool, need_weights: bool, head_mask: Tensor | None = None
    ) -> tuple[Tensor, Tensor | None]:
        """x: (batch, pos, d_model) -> (same, weights (batch, head, q_pos, k_pos) or None).
        head_mask (head,) multiplies each head's output before W_O (ablation)."""
        h = self.ln1(x)
        out, weights = self.attn(
            h,
            h,
            h,
            need_weights=need_weights,
            is_causal=causal,
            average_attn_weights=False,
            head_mask=head_mask,
        )
        x = x + out
        return x + self.mlp(self.ln2(x)), weights


class TinyTransformer(nn.Module):
    """The model for one RunConfig; ``forward`` returns logits (batch, output, class)."""

    def __init__(self, config: RunConfig, spec: TaskSpec | None = None) -> None:
        super().__init__()
        self.spec = spec or get_task(config.task)[0]
        d = config.d_model
        self.embed = nn.ModuleList(nn.Embedding(v, d) for v in self.spec.vocab_sizes)
        self.pos = nn.Embedding(self.spec.seq_len, d)
        self.blocks = nn.ModuleList(Block(config) for _ in range(config.layers))
        self.ln_f = nn.LayerNorm(d)
        per_position = self.spec.num_outputs if self.spec.readout == "last" else 1
        self.readout = nn.Linear(d, per_position * self.spec.num_classes)

    def forward(
        self,
        tokens: Tensor,
        *,
        need_weights: bool = False,
        head_mask: list[Tensor | None] | None = None,
    ) -> tuple[Tensor, list[Tensor] | None]:
        """tokens (batch, pos, feature) -> (logits (batch, output, class), per-layer weights
        (batch, head, q_pos, k_pos) when need_weights else None). head_mask: one (head,)
        tensor or None per layer."""
        batch, pos, _ = tokens.shape
        x = self.pos.weight[:pos].unsqueeze(0)
        for f, table in enumerate(self.embed):
            x = x + table(tokens[..., f])  # (batch, pos, d_model)
        weights = []
        masks = head_mask or [None] * len(self.blocks)
        for block, mask in zip(self.blocks, masks, strict=True):
            x, w = block(x, causal=self.spec.causal, need_weights=need_weights, head_mask=mask)
            weights.append(w)
        x = self.ln_f(x)
        if self.spec.readout == "last":
            logits = self.readout(x[:, -1]).view(batch, self.spec.num_outputs, -1)
        else:
            logits = self.readout(x)  # (batch, pos = output, class)
        return logits, weights if need_weights else None


def attention_entropy(weights: list[Tensor], readout: str) -> list[float]:
    """Mean entropy (nats) of each head's attention rows, layer-major: L*H floats.

    Rows are those the readout depends on: in the last layer only the last query when the
    readout is "last"; every query otherwise.
    """
    out: list[float] = []
    for i, w in enumerate(weights):  # (batch, head, q_pos, k_pos)
        last_only = readout == "last" and i == len(weights) - 1
        rows = w[:, :, -1:] if last_only else w
        ent = entropy(rows)  # (batch, head, q_pos)
        out.extend(ent.mean(dim=(0, 2)).tolist())
    return out
