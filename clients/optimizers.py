"""The app's own optimizer inside the project's local objectives.

A Flower app trains with its own ``torch.optim`` optimizer (Flower's quickstart-pytorch:
``SGD(params, lr, momentum=0.9)``). The client blocks take it as ``optimizer=``: an
instance built over the model's parameters, or a factory ``params -> optimizer`` (any
torch optimizer class with its settings bound, e.g. ``lambda p: torch.optim.SGD(p,
lr=0.1, momentum=0.9)``). This module turns either into the optimizer of one local fit:

- the round's step size, where one is given (the train config's ``lr``, else the
  block's ``lr=``), is set on the model's parameter groups, as torch's schedulers do;
  without one, the optimizer keeps its own;
- a scalar the objective trains jointly with the model (Fed-CVaR-Avg's t, rFedFair's eta)
  joins as a parameter group of its own, with its own step size (``lr-t``, ``lr-eta``)
  and the optimizer's other settings (momentum, ...): a factory gets ``[{"params":
  model's}, {"params": [t], "lr": lr_t}]``, an instance has the group added for the fit
  and removed after it.

Nothing here imports ``torch.optim`` (~4 s of start-up,
:func:`fedram_flwr.clients.training.sgd_step`): an optimizer is anything with
``param_groups``, ``step()`` and ``add_param_group``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any, Protocol

import torch
from torch import nn


class Optimizer(Protocol):
    """What a local fit needs of a ``torch.optim.Optimizer``."""

    param_groups: list[dict[str, Any]]
    state: dict

    def step(self) -> Any: ...

    def add_param_group(self, param_group: dict[str, Any]) -> None: ...


OptimizerSpec = Optimizer | Callable[[Any], Optimizer]
"""``optimizer=`` of the client blocks: an instance over the model's parameters, or a
factory called with the parameters (or parameter groups) to train."""


def check_spec(spec: Any, block: str) -> None:
    """``spec`` is an optimizer instance or a callable factory, else a ValueError."""
    if not (hasattr(spec, "param_groups") or callable(spec)):
        raise ValueError(
            f"{block}: optimizer={spec!r} is neither a torch optimizer nor a factory: pass "
            "an instance built over model.parameters() or a callable params -> optimizer, "
            "e.g. lambda params: torch.optim.SGD(params, lr=0.1, momentum=0.9)"
        )


def owned(optimizer: Optimizer) -> list[torch.Tensor]:
    """Every tensor the optimizer steps, group by group."""
    return [p for group in optimizer.param_groups for p in group["params"]]


def build(
    spec: OptimizerSpec, model: nn.Module, extra: Sequence[dict[str, Any]], block: str
) -> Optimizer:
    """The optimizer of one fit: a factory called with the model's parameters (and the
    ``extra`` groups after them), or the instance, checked to step exactly the model's
    parameters, with the ``extra`` groups added (:func:`fitting` removes them)."""
    check_spec(spec, block)
    params = list(model.parameters())
    if not hasattr(spec, "param_groups"):
        optimizer = spec([{"params": params}, *extra] if extra else params)
        if not hasattr(optimizer, "param_groups"):
            raise ValueError(
                f"{block}: the optimizer factory returned {type(optimizer).__name__}, not a "
                "torch optimizer: it must return e.g. torch.optim.SGD(params, ...)"
            )
    else:
        optimizer = spec
    ids, want = [id(p) for p in owned(optimizer)], [id(p) for p in params]
    for group in extra:
        want += [id(p) for p in group["params"]]
    if spec is optimizer:
        if sorted(ids) != sorted(id(p) for p in params):
            raise ValueError(
                f"{block}: the optimizer's {len(ids)} tensors are not this model's "
                f"{len(params)} parameters: build it over the model you pass "
                "(torch.optim.SGD(model.parameters(), ...)) or pass a factory "
                "params -> optimizer"
            )
        for group in extra:
            optimizer.add_param_group(dict(group))
    elif sorted(id(p) for p in owned(optimizer)) != sorted(want):
        raise ValueError(
            f"{block}: the optimizer the factory returned does not step exactly the "
            f"{len(want)} tensors it was given: build it over its argument"
        )
    return optimizer


def set_lr(optimizer: Optimizer, lr: float | None, model_groups: int) -> float:
    """Set ``lr`` (when given) on the first ``model_groups`` groups (the model's); return
    the step size they take, which must be one number."""
    groups = optimizer.param_groups[:model_groups]
    if lr is not None:
        for group in groups:
            group["lr"] = lr
    rates = {float(group["lr"]) for group in groups}
    if len(rates) != 1:
        raise ValueError(
            f"optimizer: the model's parameter groups step with different lr {sorted(rates)}; "
            "send 'lr' in the train config or pass lr=... to set one step size"
        )
    return rates.pop()


@contextmanager
def fitting(
    spec: OptimizerSpec, model: nn.Module, extra: Sequence[dict[str, Any]], block: str
) -> Iterator[Optimizer]:
    """:func:`build`, and afterwards the ``extra`` groups (and their state) taken out of
    an instance again, so the app's optimizer is left as it was given."""
    optimizer = build(spec, model, extra, block)
    try:
        yield optimizer
    finally:
        if optimizer is spec and extra:
            for group in optimizer.param_groups[-len(extra) :]:
                for p in group["params"]:
                    optimizer.state.pop(p, None)
            del optimizer.param_groups[-len(extra) :]


def require_plain_sgd(optimizer: Optimizer, block: str, why: str) -> None:
    """A ValueError unless ``optimizer`` steps plain SGD (``torch.optim.SGD`` without
    momentum, Nesterov or maximize): ``why`` says what relies on it."""
    cls = type(optimizer)
    plain = f"{cls.__module__}.{cls.__name__}" in {"torch.optim.sgd.SGD", "torch.optim.SGD"}
    bad = [
        f"{key}={group.get(key)}"
        for group in optimizer.param_groups
        for key in ("momentum", "nesterov", "maximize")
        if group.get(key)
    ]
    if not plain or bad:
        got = cls.__name__ + (f" with {', '.join(sorted(set(bad)))}" if bad else "")
        raise ValueError(
            f"{block}: optimizer={got} is refused: {why}. Allowed: no optimizer (the block "
            "steps plain SGD) or torch.optim.SGD with momentum=0 (weight_decay allowed)"
        )
