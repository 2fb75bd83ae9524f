"""Which transformers families the route runs, as plain data: ``headlab model families --json``.

``families``: the text families whose model called headlab's registered attention in one forward
of their default config (``models.hf.families.family_support`` observes them); ``not_observed``:
family -> why its default config showed nothing (a checkpoint's own config may still run).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from headlab.results.schema import Fields, problem

WHERE = "model-families"


@dataclass(frozen=True)
class FamilySupport:
    families: list[str]
    not_observed: dict[str, str] = field(default_factory=dict)

    def to_dict(self) -> dict[str, object]:
        return {"families": list(self.families), "not_observed": dict(self.not_observed)}

    @classmethod
    def from_dict(cls, data: object, where: str = WHERE) -> FamilySupport:
        f = Fields(data, where)
        families = f.list("families")
        for i, name in enumerate(families):
            if not isinstance(name, str) or not name:
                raise problem(f"{f.at('families')}[{i}]", "a family name", name)
        why = f.object("not_observed")
        for name, reason in why.data.items():
            if not isinstance(reason, str):
                raise problem(why.at(name), "a reason (a string)", reason)
        return cls(list(families), dict(why.data))
