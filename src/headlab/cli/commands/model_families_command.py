"""``headlab model families``: the transformers families the route runs, observed."""

from __future__ import annotations

import sys

import typer

from headlab.cli.model_options import AS_JSON
from headlab.cli.outputs import print_json
from headlab.cli.progress import progress


def families(as_json: bool = AS_JSON) -> None:
    """The transformers families headlab runs (the one route: its attention inside transformers).

    Observed in the installed transformers: the families whose text model calls its
    AttentionInterface in one forward on the meta device (about a minute for all, once per
    transformers version: later calls read it from headlab's cache), then those whose default
    config showed nothing, and why."""
    from headlab.results.kept_families import kept_family_support

    support = kept_family_support()  # without importing torch: a second
    if support is None:
        from headlab.models.hf.families_cache import observe_and_keep
        from headlab.models.hf.requirements import require_transformers

        require_transformers()
        if not as_json:  # why this call takes a minute, before it does
            import transformers

            from headlab.models.hf.families import text_families

            print(
                f"headlab: observing {len(text_families())} families' forwards once for "
                f"transformers {transformers.__version__}: about a minute; later calls read "
                "the cache",
                file=sys.stderr,
                flush=True,
            )
        with progress("observing each family's forward", None, quiet=as_json) as update:
            support = observe_and_keep(on_step=update)
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
