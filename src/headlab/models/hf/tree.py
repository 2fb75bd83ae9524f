"""A model that shares every module with another but a few: the variants of the transformers route.

``replaced(root, {path: module})`` returns a new root in which the modules at ``path`` (dotted,
as ``named_modules`` gives them) are the given ones. Each ancestor of a replaced module is a
shallow view of the original (``attention.views.shared_view``: the same parameters, buffers,
children and attributes, its own registries), every other module is the original object itself.
No parameter is copied and the original model is unchanged, so a head view, a pruned model or
new W_Q and W_K cost only the modules they change.

Forward hooks are carried over to the views (transformers' output-capturing hooks sit on
attention modules and decoder layers, installed once per model).
"""

from __future__ import annotations

from collections.abc import Mapping

from torch import nn

from headlab.attention.views import shared_view

_HOOKS = (
    "_forward_hooks",
    "_forward_hooks_with_kwargs",
    "_forward_hooks_always_called",
    "_forward_pre_hooks",
    "_forward_pre_hooks_with_kwargs",
)


def view_of(module: nn.Module) -> nn.Module:
    """``shared_view(module)`` with ``module``'s forward hooks."""
    view = shared_view(module)
    for name in _HOOKS:
        getattr(view, name).update(getattr(module, name))
    return view


def replaced(root: nn.Module, new: Mapping[str, nn.Module]) -> nn.Module:
    """``root`` with the module at each path of ``new`` replaced (see the module docstring).
    Raises ValueError for a path that is not a module of ``root``."""
    if "" in new:
        return new[""]
    children = dict(root.named_children())
    changed = {}
    for path in new:
        head = path.split(".", 1)[0]
        if head not in children:
            raise ValueError(f"no module {path!r} in {type(root).__name__}")
        changed.setdefault(head, {})[path[len(head) + 1 :]] = new[path]
    view = view_of(root)
    for name, below in changed.items():
        setattr(view, name, replaced(children[name], below))
    return view
