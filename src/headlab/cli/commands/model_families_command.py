"""``headlab model families``: the transformers families the route runs, observed."""

from __future__ import annotations

import typer

from headlab.cli.model_options import AS_JSON
from headlab.cli.outputs import print_json
from headlab.cli.progress import progress


def families(as_json: bool = AS_JSON) -> None:
    """The transformers families headlab runs (the one route: its attention inside transformers).

    Observed in the installed transformers: the families whose text model calls its
    AttentionInterface in one forward on the meta device (about a minute for all), then
    those whose default config showed nothing, and why."""
    from headlab.models.hf.families import family_support
    from headlab.models.hf.requirements import require_transformers

    require_transformers()
    with progress("observing each family's forward", None, quiet=as_json) as update:
        support = family_support(on_step=update)
    if as_json:
        print_json(support.to_dict())
        return
    print("\n".join(support.families))
    unobserved = support.not_observed
    if unobserved:
        print(f"not observed ({len(unobserved)}; a checkpoint's own config may still run):")
        print("\n".join(f"  {family}: {why}"[:80] for family, why in unobserved.items()))


def register(group: typer.Typer) -> None:
    """Add this command to the ``model`` group (``headlab.cli.app``)."""
    group.command("families")(families)
