"""Class swaps: give a built module a faster subclass in place, and take it back.

A fast variant (:class:`~nmtkit.fast.dropout.FastDropout`, ...) subclasses the readable
module and overrides one method. :func:`swap_class` changes an existing module's class to
it, as ``torch.nn.utils.parametrize`` does for its parametrized modules: the module object,
its parameters, buffers, hooks and its place in the model stay, so the state dict, an
optimizer holding the parameters and tied weights are untouched. :func:`restore_class`
undoes the last swap of a module.
"""

from __future__ import annotations

from torch import nn

_STACK = "_nmtkit_fast_classes"  # the classes a module had before each swap, most recent last


def swap_class(module: nn.Module, cls: type[nn.Module]) -> None:
    """Make ``module`` an instance of ``cls``, which must subclass the module's readable class."""
    plain = original_class(module)
    if not issubclass(cls, plain):
        raise TypeError(f"{cls.__name__} is not a subclass of {plain.__name__}")
    if type(module) is cls:
        return
    module.__dict__.setdefault(_STACK, []).append(type(module))
    module.__class__ = cls


def restore_class(module: nn.Module) -> bool:
    """Undo the last :func:`swap_class` of ``module``; returns whether there was one."""
    stack = module.__dict__.get(_STACK)
    if not stack:
        return False
    module.__class__ = stack.pop()
    if not stack:
        del module.__dict__[_STACK]
    return True


def original_class(module: nn.Module) -> type[nn.Module]:
    """The class ``module`` was built with, before any swap."""
    stack = module.__dict__.get(_STACK)
    return stack[0] if stack else type(module)


def is_swapped(module: nn.Module) -> bool:
    return bool(module.__dict__.get(_STACK))
