"""Hand-built documents for the corpus-roles tests (tests/heads, tests/experiments, tests/cli).

On the tiny random decoder (``tiny_llama``: t0..t96, 64 positions): a passage repeated after a
filler (10 copy positions with ``min_match`` 4: the 14-token passage after its first 4), the
model's own greedy continuation of a prompt (its top-1 prediction is right at every copy
position, so the retrieval counts are not all zero) and a short text without repeats, not longer
than the window (no copy positions, no window errors).
"""

from __future__ import annotations

from headlab.results.corpus_roles_result import RoleRequest

OPTIONS = RoleRequest(sinks=2, window=8, min_match=4)
PASSAGE = " ".join(f"t{(11 * i) % 97}" for i in range(14))
FILLER = " ".join(f"t{(3 * i + 1) % 89}" for i in range(23))


_MADE: dict[int, tuple[object, dict[str, str]]] = {}  # id(model) -> (model, its documents)


def documents(model) -> dict[str, str]:
    """name -> text: "repeat" (52 tokens), "greedy" (60), "plain" (6). Made once per model (56
    greedy steps take seconds on a busy machine)."""
    if id(model) not in _MADE:
        prompt = "t40 t41 t42 t43"
        made = {
            "repeat": f"t0 {PASSAGE} {FILLER} {PASSAGE}",
            "greedy": f"{prompt} {model.decode(model.generate(prompt, 56))}",
            "plain": "t1 t2 t3 t4 t5 t6",
        }
        _MADE[id(model)] = (model, made)  # the model kept: its id stays its own
    return dict(_MADE[id(model)][1])
