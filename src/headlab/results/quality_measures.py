"""The names of the measures a collapsed or pruned model is judged by
(``headlab.heads.quality``)."""

from __future__ import annotations

# The names ``measures`` gives, by kind of model: the only measures a results row may carry.
CAUSAL_MEASURES = ("perplexity", "next_token_agreement")


ENCODER_MEASURES = ("mean_cosine", "nn_agreement")


MEASURES = (CAUSAL_MEASURES, ENCODER_MEASURES)


# Those that are shares in [0, 1], every one but perplexity (the report draws them on one axis).
SHARE_MEASURES = tuple(name for names in MEASURES for name in names if name != "perplexity")
