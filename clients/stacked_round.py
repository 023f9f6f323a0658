"""A round's clients trained as one stacked computation, with no call, thread or model
copy per client (``training.batched``), for the objectives that have a stacked form.

An objective has a stacked form (:data:`STACKED_FORMS`) when its local work is ERM's
local SGD and its reply is the trained model with metrics read from the steps' losses:
ERM's :func:`~fedram_flwr.clients.erm.fit_erm` (FedAvg and the memory methods: MIFA,
FedVARP, FedAU, FedAWE, FedAR) and CA-Fed's :func:`~fedram_flwr.clients.ca_fed.fit_ca_fed`
(CA-Fed, AFL, q-FFL). :func:`stacked_fits` runs, for every client of a node's experiment
(:class:`~fedram_flwr.clients.node.NodeExperiment`, whose clients the in-process engines
build) in the round, what its ``fit`` runs, in three sweeps, without building the client:
the objective's work before training (CA-Fed's F_k*), every client's local SGD as one job of
:func:`~fedram_flwr.clients.batched.stacked_sgd` (the same batches from the same
(seed, round, id) streams, step sizes, epochs and weight decay as ``fit``), then each
reply from its trained rows and its steps' losses. The arrays of a reply are views of
the stacked result (no copy per client).

The same numbers as the relay of :class:`~fedram_flwr.clients.batched_round.BatchedRound`
(the same stacked jobs, in the same order), so the same float32 tolerance against the
per-client loop (docs/performance.md). The other objectives (a hook per step or state
after training: Fed-CVaR-Avg, SCAFFOLD, FOCUS, rFedFair) keep the relay, which runs
their own ``fit``. A client's ``train-seconds`` here is its share of the stacked SGD:
the stack's seconds over its number of clients.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np
import torch
from flwr.common import NDArrays, RecordDict

from fedram_flwr.clients.batched import SGDJob, stacked_sgd
from fedram_flwr.clients.batches import client_rngs
from fedram_flwr.clients.ca_fed import ca_fed_floor, ca_fed_report, fit_ca_fed
from fedram_flwr.clients.erm import ERMClient, FitResult, LocalFit, fit_erm
from fedram_flwr.clients.models import parameter_list
from fedram_flwr.clients.node import NodeExperiment
from fedram_flwr.clients.train_blocks import objective_of
from fedram_flwr.clients.training import LocalTrainer, reported_loss


@dataclass(frozen=True)
class StackedForm:
    """An objective's fit around its stacked SGD: ``before(trainer, parameters, config,
    state)`` gives the metrics it works out before training, ``after(losses, before)``
    the metrics it adds once trained (from every step's loss); None: nothing.
    """

    before: Callable[[LocalTrainer, NDArrays, Mapping[str, Any], RecordDict], dict] | None = None
    after: Callable[[list[float], dict], dict] | None = None


STACKED_FORMS: dict[LocalFit, StackedForm] = {
    fit_erm: StackedForm(),
    fit_ca_fed: StackedForm(before=ca_fed_floor, after=ca_fed_report),
}
"""The local objectives with a stacked form, by their local fit function."""


def stacked_form(client: type[ERMClient]) -> StackedForm | None:
    """The stacked form of the clients of class ``client``, or None (they run their own
    ``fit``): a client class of this package that fits by :meth:`ERMClient.fit` (no
    subclass's own ``fit``) with an objective in :data:`STACKED_FORMS`."""
    if not (isinstance(client, type) and issubclass(client, ERMClient)):
        return None
    if client.fit is not ERMClient.fit:
        return None
    return STACKED_FORMS.get(client.local_fit)


def experiment_form(exp: NodeExperiment) -> StackedForm | None:
    """The stacked form of ``exp``'s clients (:meth:`NodeExperiment.client`: its
    algorithm's objective, no personal layers), or None."""
    return stacked_form(objective_of(exp.scenario.algorithm.name).client)


class RoundClient(NamedTuple):
    """One client of a stacked round: its partition id, its ``Context.state``, the
    arrays it received and its train config."""

    partition_id: int
    state: RecordDict
    parameters: NDArrays
    config: Mapping[str, Any]


def stacked_fits(exp: NodeExperiment, clients: Sequence[RoundClient]) -> list[FitResult]:
    """What each client's ``fit`` (``exp.client(partition_id, state).fit(parameters,
    config)``) returns, Flower's fit triple, in order: the clients' local SGD run as one
    stacked job (see the module docstring), each client's data and settings read from
    ``exp`` (:meth:`NodeExperiment.trainer`) without building its client. ``exp``'s
    objective must have a stacked form (:func:`experiment_form`) and its model be one
    :func:`~fedram_flwr.clients.batched.unbatchable` accepts."""
    form = experiment_form(exp)
    if form is None:
        raise ValueError(
            f"stacked round: algorithm.name {exp.scenario.algorithm.name}'s local objective "
            "has no stacked form"
        )
    if not clients:
        return []
    model = exp.client_model()
    params = parameter_list(model)
    starts: dict[int, list[torch.Tensor]] = {}  # the round's received models, once each
    jobs, befores = [], []
    trainers = [exp.trainer(c.partition_id, model) for c in clients]
    keys = [t.data.stream_keys(c.config) for t, c in zip(trainers, clients)]  # type: ignore[attr-defined]
    for c, trainer, rng in zip(clients, trainers, client_rngs(keys)):
        before = (
            {} if form.before is None else form.before(trainer, c.parameters, c.config, c.state)
        )
        key = id(c.parameters)
        if key not in starts:
            starts[key] = start_tensors(c.parameters, params)
        epochs, steps = trainer.round_epochs(c.config), trainer.local_steps
        jobs.append(
            SGDJob(
                starts[key],
                None,
                epochs=epochs,
                lr=trainer.round_lr(c.config),
                steps=steps,
                weight_decay=trainer.weight_decay,
                plan=trainer.data.plan(c.config, epochs, steps, rng),  # type: ignore[attr-defined]
            )
        )
        befores.append(before)
    begin = time.perf_counter()
    results = stacked_sgd(model, jobs)
    share = (time.perf_counter() - begin) / len(jobs)
    out: list[FitResult] = []
    for trainer, job, result, before in zip(trainers, jobs, results, befores):
        loss = reported_loss(result.losses, trainer.local_steps, job.pass_lengths[-1])
        metrics = trainer.run_of(loss, result.steps, job.lr, share).metrics
        if form.after is not None:
            metrics = {**metrics, **form.after(result.losses, before)}
        out.append((result.arrays(), trainer.num_examples, metrics))
    return out


def start_tensors(arrays: NDArrays, params: Sequence[torch.Tensor]) -> list[torch.Tensor]:
    """The received ``arrays`` as the model's parameters would hold them after
    ``set_weights`` (their dtype, on their device).
    """
    if len(arrays) != len(params):
        raise ValueError(
            f"stacked round: received {len(arrays)} arrays for a model of {len(params)} parameters"
        )
    out = []
    for a, p in zip(arrays, params):
        if tuple(a.shape) != tuple(p.shape):
            raise ValueError(
                f"stacked round: a received array of shape {tuple(a.shape)} for a "
                f"parameter of shape {tuple(p.shape)}"
            )
        out.append(torch.as_tensor(np.asarray(a)).to(device=p.device, dtype=p.dtype))
    return out
