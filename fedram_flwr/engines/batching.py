"""Whether an in-process run batches its rounds' clients (``training.batched``), and the
:class:`RoundBatch` that does.

``off`` (the default): each client's local SGD in turn, the per-client loop, bit for bit
as before. ``on``: every round's clients' SGD stacked (:mod:`fedram_flwr.clients.batched`):
a legacy round of ERM or CA-Fed clients as one job with no client call
(:mod:`fedram_flwr.clients.stacked_round`), any other round's client calls relayed up to
their SGD (:class:`~fedram_flwr.clients.batched_round.BatchedRound`); a model that cannot
be stacked (dropout, batch norm) is an error naming why. ``auto``: stacked where that is
exact (to float32 rounding) and measured faster than the loop (bench/many_clients.py,
docs/performance.md): models without convolutions; the per-client loop elsewhere. A
client alone in its round (with its model) trains in the per-client loop whatever the
mode: there is nothing to stack. Flower's engines keep one ClientApp per node, as real
deployments do: batching is for the in-process engines.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any, Literal

from torch import nn

from fedram_flwr.clients.batched import unbatchable
from fedram_flwr.clients.batched_round import BatchedRound, Outcome
from fedram_flwr.clients.erm import fit_res
from fedram_flwr.clients.models import module_list
from fedram_flwr.clients.node import NodeExperiment
from fedram_flwr.clients.stacked_round import experiment_form, stacked_fits


def stacked_is_faster(model: nn.Module) -> bool:
    """Where stacked SGD measured faster than the per-client loop (bench/many_clients.py on
    the CPU, docs/performance.md): a model without convolutions (rounds of logistic
    models: 0.2-0.5x the plain PyTorch loop). A stacked convolution (a grouped one, one
    group per client) measured slower than the per-client round on the CPU (100-client
    LeNet-5); on a GPU it was not measured, so ``auto`` keeps the loop there too."""
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


class RoundBatch:
    """How a batched in-process run runs a round's clients. A legacy round's fits
    (:meth:`fits`): one stacked job with no call per client
    (:func:`~fedram_flwr.clients.stacked_round.stacked_fits`) when every client's
    objective has a stacked form; otherwise, and for the Message API's deliveries
    (:meth:`run`), the relay of :class:`~fedram_flwr.clients.batched_round.BatchedRound`,
    which runs each client's own code and stacks its SGD."""

    def __init__(self, mode: Literal["on", "auto"], exp: NodeExperiment) -> None:
        self.relay = BatchedRound(mode)
        self.exp = exp
        self.form = experiment_form(exp)

    def close(self) -> None:
        """End the relay's worker threads."""
        self.relay.close()

    def run(self, calls: Sequence[Callable[[], Any]]) -> list[Outcome]:
        """``calls`` through the relay (:meth:`BatchedRound.run`)."""
        return self.relay.run(calls)

    def fits(
        self, instructions: Sequence[tuple[Any, Any]], fit: Callable[[Any, Any], Any]
    ) -> list[Outcome]:
        """The outcomes of a legacy round's ``fit(proxy, ins)`` calls, in order (a value:
        Flower's ``(proxy, FitRes)``). Stacked without the calls
        (:func:`~fedram_flwr.clients.stacked_round.stacked_fits`) when the run's objective
        has a stacked form, there are two clients or more and every proxy is one of the
        run's clients (``stacked_client(ins, exp)``, the in-process proxy's); one exception
        there is every client's failure. Otherwise through the relay."""
        parts = []
        if self.form is not None and len(instructions) > 1:
            for proxy, ins in instructions:
                part = getattr(proxy, "stacked_client", None)
                if (part := None if part is None else part(ins, self.exp)) is None:
                    break
                parts.append(part)
        if len(parts) < max(len(instructions), 2):  # (the model: checked by batching_mode)
            return self.run([lambda p=proxy, i=ins: fit(p, i) for proxy, ins in instructions])
        try:
            results = stacked_fits(self.exp, parts)
        except Exception as err:  # noqa: BLE001 - each client's failure, as the relay's
            return [Outcome(error=err) for _ in instructions]
        return [  # their arrays are views of the stack, which nothing writes again
            Outcome(value=(proxy, fit_res(r, encode=False)))
            for (proxy, _), r in zip(instructions, results)
        ]


@contextmanager
def round_batcher(exp: NodeExperiment) -> Iterator[RoundBatch | None]:
    """The run's :class:`RoundBatch` (closed at the end), or None: see
    :func:`batching_mode`."""
    mode = batching_mode(exp)
    if mode is None:
        yield None
        return
    batch = RoundBatch(mode, exp)
    try:
        yield batch
    finally:
        batch.close()
