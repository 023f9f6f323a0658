"""The train blocks of the Message API: one :class:`Objective` per local objective.

Each ``train_*`` block (an :class:`Objective`) is what a user's ``@app.train()`` handler
calls (see :mod:`fedram_flwr.clients.message`, which re-exports them): it checks the
message against its strategy's wire contract, runs the legacy NumPyClient's local fit
and returns the checked reply; its ``.local(...)`` form
(:class:`~fedram_flwr.clients.local_training.LocalTraining`) is the same round in the shape
of a Flower app's own ``train`` function and reply lines. :data:`OBJECTIVES` lists the
blocks; :func:`objective_of` finds the one that answers an algorithm's strategy (the
project's ClientApp, without the registry), :func:`objective_for` the one over a legacy
NumPyClient class.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import torch
from flwr.app import Context, Message, MetricRecord, RecordDict
from torch import nn

from fedram_flwr.clients.batches import Batch
from fedram_flwr.clients.ca_fed import CAFedClient
from fedram_flwr.clients.cvar import CVaRClient
from fedram_flwr.clients.erm import ERMClient, FitResult
from fedram_flwr.clients.focus import FocusClient
from fedram_flwr.clients.local_training import LocalTraining
from fedram_flwr.clients.models import get_weights
from fedram_flwr.clients.optimizers import OptimizerSpec, check_spec
from fedram_flwr.clients.rc_fl import RCFLClient
from fedram_flwr.clients.scaffold import AmplifiedScaffoldClient, ScaffoldClient
from fedram_flwr.clients.training import LocalTrainer
from fedram_flwr.clients.wire import (
    ARRAYS,
    METRICS,
    MODEL,
    WITH_CONTROL,
    WITH_THRESHOLD,
    Layout,
    array_keys,
    model_part,
    received,
    reply_content,
)
from fedram_flwr.protocol import (
    CVAR_ALPHA,
    CVAR_GAMMA,
    LOCAL_OPTIMUM,
    LR_ETA,
    LR_T,
    NUM_EXAMPLES,
    PARTITION_ID,
    PERIOD,
    RCFL_ALPHA,
    RCFL_MU,
    RCFL_P,
    RECEIVED_LOSS,
    REPORT_LOCAL_OPTIMUM,
    THRESHOLD_ETA,
    THRESHOLD_T,
    TRAIN_LOSS,
)


@dataclass(frozen=True)
class Objective:
    """One local objective as a Message-API building block.

    ``block(msg, context, model, trainloader, lr=..., epochs=...)`` returns the reply
    Message (:meth:`__call__`).

    Parameters
    ----------
    block, algorithm : str
        The block's name and the algorithm(s) whose strategy it answers, for errors.
    client : type of ERMClient
        The legacy NumPyClient whose local fit it runs.
    layout : Layout
        How the strategy sends the model (alone, with t or eta, with a control variate).
    config_keys, optional_keys : tuple of str
        The train-config keys its strategy always sends, and those it may send.
    metrics : tuple of str
        The reply metrics its strategy reads beyond ``num-examples``, ``partition-id``
        and ``train-loss``.
    algorithms : tuple of str
        The scenario names (``algorithm.name``) whose strategies it answers
        (:func:`objective_of`: the project's ClientApp finds its objective there,
        without the registry).
    """

    block: str
    algorithm: str
    client: type[ERMClient]
    layout: Layout = MODEL
    config_keys: tuple[str, ...] = ()
    metrics: tuple[str, ...] = ()
    optional_keys: tuple[str, ...] = ()
    algorithms: tuple[str, ...] = ()

    def __call__(
        self,
        msg: Message,
        context: Context,
        model: nn.Module,
        trainloader: Iterable[Any],
        *,
        lr: float | None = None,
        epochs: int = 1,
        steps: int | None = None,
        weight_decay: float = 0.0,
        to_xy: Callable[[Any], Batch] | None = None,
        device: torch.device | str | None = None,
        optimizer: OptimizerSpec | None = None,
    ) -> Message:
        """Train ``model`` on ``trainloader`` for the received message; return the reply.

        Parameters
        ----------
        msg, context : Message, Context
            The ``@app.train()`` handler's arguments.
        model : nn.Module
            The app's torch model; the message's model arrays are loaded into it first,
            by key (entries the message does not carry stay as they are).
        trainloader : iterable
            The client's training batches.
        lr : float, optional
            The step size (> 0), unless the train config sends ``lr``.
        epochs : int
            Passes over the loader, >= 1 (the config's ``local-epochs`` overrides).
        steps : int, optional
            Exactly this many SGD steps (>= 1) instead of ``epochs``.
        weight_decay : float
            As SGD's, >= 0; not with ``optimizer``.
        to_xy : callable, optional
            Turns a batch into (inputs, labels) (default: an (x, y) pair; dict batches
            need e.g. ``lambda b: (b["img"], b["label"])``).
        device : torch.device or str, optional
            Where batches move (default: the model's device).
        optimizer : OptimizerSpec, optional
            The app's own, an instance over ``model.parameters()`` or a factory
            ``params -> optimizer``, stepping instead of plain SGD (the round's ``lr``
            set on it; :mod:`fedram_flwr.clients.optimizers`; what each objective does with it:
            docs/API.md).

        Returns
        -------
        Message
            The reply: ``"arrays"`` and ``"metrics"`` (``num-examples`` and the fit's).

        Raises
        ------
        ValueError
            Naming the key, the algorithm and the fix, on a breach of the contract.
        """
        local = self.local(
            msg, context, optimizer=optimizer, to_xy=to_xy, steps=steps, weight_decay=weight_decay
        )
        local.load = True  # the one-call form loads what the message carries, by key
        local.train(model, trainloader, epochs, lr, device)
        return local.reply()

    def local(
        self,
        msg: Message,
        context: Context,
        *,
        optimizer: OptimizerSpec | None = None,
        to_xy: Callable[[Any], Batch] | None = None,
        steps: int | None = None,
        weight_decay: float = 0.0,
    ) -> LocalTraining:
        """Return this objective's round in the shape of a Flower app's own training.

        See :class:`LocalTraining`; arguments as for calling the block.
        """
        if optimizer is not None:
            check_spec(optimizer, self.block)
            if weight_decay:
                raise ValueError(
                    f"{self.block}: weight_decay={weight_decay} and optimizer=... both given: "
                    "set the weight decay on your optimizer (e.g. SGD(..., weight_decay=...))"
                )
        return LocalTraining(self, msg, context, optimizer, to_xy, steps, weight_decay)

    def reply(self, msg: Message, context: Context, trainer: LocalTrainer) -> Message:
        """Check the message, run the local fit with ``trainer``, check and return the reply."""
        fit, config = self.fit(msg, context, trainer)
        return self.answer(msg, fit, config)

    def fit(
        self, msg: Message, context: Context, trainer: LocalTrainer, *, load: bool = True
    ) -> tuple[FitResult, dict[str, Any]]:
        """Check the message and run the local fit with ``trainer``; the fit and config.

        The fit starts from ``trainer.model`` as it is, after ``load`` (where true) has
        put the message's model arrays into it by key (:func:`.wire.model_part`); the fit's
        arrays are read back by key: the message's model keys, then what the algorithm
        sends beside them (t, eta, the control).
        """
        arrays, config = received(msg, self.block)
        self.check_config(config)
        keys, extra = model_part(msg, arrays, trainer.model, self.layout, load, self)
        theta = get_weights(trainer.model)  # the model that trains: the handler's, or loaded
        fitted, num_examples, metrics = self.client.local_fit(
            trainer, theta + extra, config, context.state
        )
        names = list(trainer.model.state_dict())
        model, rest = fitted[: len(names)], fitted[len(names) :]
        if keys is not None:
            model = [model[names.index(k)] for k in keys]
        return (model + rest, num_examples, metrics), config

    def answer(
        self,
        msg: Message,
        fit: FitResult,
        config: Mapping[str, Any],
        content: RecordDict | None = None,
    ) -> Message:
        """Build the checked reply to ``msg`` from the fit's arrays and metrics.

        They go in the app's ``content`` where given (its other records kept, its
        metrics beside ours; ours win where both have a key).
        """
        ours = reply_content(fit, [k for ks in array_keys(msg) for k in ks])
        if content is not None:
            app_metrics = content.metric_records.get(METRICS, MetricRecord())
            metrics = MetricRecord({**app_metrics, **ours[METRICS]})
            ours = RecordDict({**dict(content.items()), ARRAYS: ours[ARRAYS], METRICS: metrics})
        self.check_reply(ours, config)
        return Message(ours, reply_to=msg)

    def check_config(self, config: Mapping[str, Any]) -> None:
        """Every key of ``config_keys`` is sent; none of another objective's is."""
        own = {*self.config_keys, *self.optional_keys}
        for other in OBJECTIVES:
            if sent := sorted({*other.config_keys, *other.optional_keys} & set(config) - own):
                raise ValueError(
                    f"{self.block}: the server sent '{sent[0]}', a key of {other.algorithm}: "
                    f"call {other.block}(...) in the @app.train() handler"
                )
        if missing := [key for key in self.config_keys if key not in config]:
            raise ValueError(
                f"{self.block}: the train config has no '{missing[0]}' (sent: {sorted(config)})"
                f": the {self.algorithm} strategy sends it; run that strategy on the server, "
                "or call the block of the algorithm it runs"
            )

    def check_arrays(self, arrays: list, model: nn.Module) -> None:
        """Check that the server sent ``layout.count(n)`` arrays for the model's n."""
        n = len(model.state_dict())
        if len(arrays) != self.layout.count(n):
            raise ValueError(
                f"{self.block}: the {self.algorithm} strategy sends {self.layout.what}: "
                f"{self.layout.count(n)} arrays for this model's {n}, but the message "
                f"carries {len(arrays)}: give the strategy the same model, with "
                f"initial_arrays={self.layout.initial}"
            )

    def check_reply(self, content: RecordDict, config: Mapping[str, Any]) -> None:
        """Check that the reply carries the arrays and every metric the strategy reads."""
        needed = [NUM_EXAMPLES, PARTITION_ID, TRAIN_LOSS, *self.metrics]
        if config.get(REPORT_LOCAL_OPTIMUM):
            needed.append(LOCAL_OPTIMUM)
        metrics = content.metric_records.get(METRICS, MetricRecord())
        if ARRAYS not in content.array_records:
            raise ValueError(f"{self.block}: the reply has no ArrayRecord '{ARRAYS}'")
        if missing := [key for key in needed if key not in metrics]:
            raise ValueError(
                f"{self.block}: the reply's '{METRICS}' lack '{missing[0]}', which "
                f"the {self.algorithm} strategy reads (it has {sorted(metrics)})"
            )


train_erm = Objective("train_erm", "FedAvg (or FedAR, MIFA, FedVARP, FedAU, ...)", ERMClient)
train_cvar = Objective(
    "train_cvar",
    "Fed-CVaR-Avg",
    CVaRClient,
    WITH_THRESHOLD,
    (CVAR_ALPHA, CVAR_GAMMA, LR_T),
    (THRESHOLD_T,),
    algorithms=("fed-cvar-avg",),
)
train_rcfl = Objective(
    "train_rcfl",
    "rFedFair (RC-FL)",
    RCFLClient,
    WITH_THRESHOLD,
    (RCFL_ALPHA, RCFL_P, RCFL_MU, LR_ETA),
    (THRESHOLD_ETA,),
    algorithms=("rfedfair",),
)
train_scaffold = Objective(
    "train_scaffold", "SCAFFOLD", ScaffoldClient, WITH_CONTROL, algorithms=("scaffold",)
)
train_amplified_scaffold = Objective(
    "train_amplified_scaffold",
    "Amplified SCAFFOLD",
    AmplifiedScaffoldClient,
    WITH_CONTROL,
    (PERIOD,),
    algorithms=("amplified-scaffold",),
)
train_ca_fed = Objective(
    "train_ca_fed",
    "CA-Fed, AFL or q-FFL",
    CAFedClient,
    metrics=(RECEIVED_LOSS,),
    optional_keys=(REPORT_LOCAL_OPTIMUM,),
    algorithms=("ca-fed", "afl", "qffl"),
)
train_focus = Objective("train_focus", "FOCUS", FocusClient, algorithms=("focus",))
OBJECTIVES = (
    train_erm,
    train_cvar,
    train_rcfl,
    train_scaffold,
    train_amplified_scaffold,
    train_ca_fed,
    train_focus,
)


def objective_for(client: type[ERMClient]) -> Objective:
    """Return the block that runs the local fit of the legacy NumPyClient class ``client``."""
    for objective in OBJECTIVES:
        if objective.client is client:
            return objective
    raise ValueError(f"no Message-API block for {client.__name__}")


def objective_of(algorithm: str) -> Objective:
    """Find the objective that answers the strategy of ``algorithm``.

    Parameters
    ----------
    algorithm : str
        A scenario's ``algorithm.name``.

    Returns
    -------
    Objective
        The one whose ``algorithms`` name it, else plain local SGD (:data:`train_erm`:
        FedAvg and every algorithm whose server alone differs).
    """
    named = [objective for objective in OBJECTIVES if algorithm in objective.algorithms]
    return named[0] if named else train_erm
