"""A decoder's greedy continuation, as plain data: ``headlab model generate --json``.

``new_ids``: every generated token id (the chat's end token too); ``text``: them decoded
without special tokens; ``ablated``: the (layer, head) pairs zeroed in every step, empty when
none (the document then has no ``ablated`` field).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from headlab.results.schema import Fields, is_int, problem

WHERE = "model-generate"


@dataclass(frozen=True)
class GenerationResult:
    model: str
    prompt: str
    new_ids: list[int]
    text: str
    ablated: list[tuple[int, int]] = field(default_factory=list)

    def to_dict(self) -> dict[str, object]:
        doc: dict[str, object] = {
            "model": self.model,
            "prompt": self.prompt,
            "new_ids": list(self.new_ids),
            "text": self.text,
        }
        if self.ablated:
            doc["ablated"] = [list(pair) for pair in self.ablated]
        return doc

    @classmethod
    def from_dict(cls, data: object, where: str = WHERE) -> GenerationResult:
        f = Fields(data, where)
        ids = f.list("new_ids")
        for i, token in enumerate(ids):
            if not is_int(token) or token < 0:
                raise problem(f"{f.at('new_ids')}[{i}]", "a token id (an integer >= 0)", token)
        pairs = f.list("ablated") if "ablated" in f.data else []
        for i, pair in enumerate(pairs):
            if not (
                isinstance(pair, list)
                and len(pair) == 2
                and all(is_int(x) and x >= 0 for x in pair)
            ):
                raise problem(f"{f.at('ablated')}[{i}]", "[layer, head]", pair)
        return cls(
            f.name("model"),
            f.text("prompt"),
            list(ids),
            f.text("text"),
            [(int(a), int(b)) for a, b in pairs],
        )
