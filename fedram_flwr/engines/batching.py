"""Whether an in-process run batches its rounds' clients (``training.batched``), and the
:class:`~fedram_flwr.clients.batched_round.BatchedRound` that does.

``off`` (the default): each client's local SGD in turn, the per-client loop, bit for bit
as before. ``on``: every round's clients' SGD stacked (:mod:`fedram_flwr.clients.batched`);
a model that cannot be (dropout, batch norm) is an error naming why. ``auto``: stacked
where that is exact (to float32 rounding) and measured faster than the loop
(bench/many_clients.py, docs/performance.md): models without convolutions; the
per-client loop elsewhere. A client alone in its round (with its model) trains in the
per-client loop whatever the mode: there is nothing to stack. Flower's engines keep
one ClientApp per node, as real deployments do: batching is for the in-process engines.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from torch import nn

from fedram_flwr.clients.batched import unbatchable
from fedram_flwr.clients.batched_round import BatchedRound
from fedram_flwr.clients.models import module_list
from fedram_flwr.clients.node import NodeExperiment


def stacked_is_faster(model: nn.Module) -> bool:
    """Where stacked SGD measured faster than the per-client loop (bench/many_clients.py on
    the CPU, docs/performance.md): a model without convolutions (rounds of logistic
    models, batched against per-client in the same run, 0.47-1.08, mostly below 1). A
    stacked convolution (a grouped one, one group per client) measured 2.4-3.3x the
    per-client round on the CPU (100-client LeNet-5); on a GPU it was not measured, so
    ``auto`` keeps the loop there too."""
    return not any(isinstance(m, nn.modules.conv._ConvNd) for m in module_list(model))


def batching_mode(exp: NodeExperiment) -> str | None:
    """``on`` or ``auto`` when ``exp``'s rounds run batched (what a client that cannot
    train stacked then does: error or loop), None for the per-client loop. Raises for
    ``on`` with a model that cannot train stacked."""
    mode = exp.scenario.training.batched
    if mode == "off":
        return None
    model = exp.client_model()
    why = unbatchable(model)
    if mode == "on" and why is not None:
        raise ValueError(
            f"training.batched: on, but model.name {exp.scenario.model.name} cannot train "
            f"stacked: {why}; use auto (the per-client loop for it) or off"
        )
    if mode == "auto" and (why is not None or not stacked_is_faster(model)):
        return None
    return mode


@contextmanager
def round_batcher(exp: NodeExperiment) -> Iterator[BatchedRound | None]:
    """The run's :class:`BatchedRound` (closed at the end), or None: see
    :func:`batching_mode`."""
    mode = batching_mode(exp)
    if mode is None:
        yield None
        return
    with BatchedRound(mode) as batch:
        yield batch
