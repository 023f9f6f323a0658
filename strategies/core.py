"""The shape every algorithm core has, Flower-free (fedjax's ``init`` / ``apply``).

A core is a small frozen value holding an algorithm's hyper-parameters; its server
state is a separate explicit value (a frozen dataclass replaced each round). The
methods are pure functions of (state, round, replies): a Flower face (the legacy
``Strategy`` in :mod:`~fedram_flwr.strategies.base`, the Message-API one in
:mod:`fedram_flwr.message_api.strategy`) only converts wire types to
:class:`~fedram_flwr.protocol.ClientReply` and back, so no algorithm is written twice.
Nothing here imports Flower.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, Generic, TypeVar

import numpy as np

from fedram_flwr.protocol import Arrays, ClientReply
from fedram_flwr.strategies.hyper import check_hypers

S = TypeVar("S")


@dataclass(frozen=True)
class Outcome(Generic[S]):
    """What one aggregation gives.

    Parameters
    ----------
    state : S
        The core's new state.
    diagnostics : dict of str to Any
        The round's diagnostics, logged as fit metrics.
    aggregated : bool
        Whether the global model moved (``False``: the server keeps the model it has, as
        Flower does when ``aggregate_fit`` returns no parameters).
    """

    state: S
    diagnostics: dict[str, Any] = field(default_factory=dict)
    aggregated: bool = True


class Core(Generic[S]):
    """An algorithm's server side, Flower-free: the contract every core implements.

    Subclasses are frozen dataclasses of hyper-parameters, each declared once with
    :func:`~fedram_flwr.strategies.hyper.hyper` (default, allowed range, doc), and
    implement :meth:`init`, :meth:`arrays` and :meth:`aggregate`; :meth:`for_model`,
    :meth:`client_count`, :meth:`fit_config`, :meth:`evaluated` and :meth:`diagnostics`
    have defaults. The state ``S`` is a separate value (a frozen dataclass, replaced each
    round); every method is a function of its arguments, so a core never changes.

    A round, as both Flower faces drive it: ``arrays(state)`` is broadcast with
    ``fit_config(state, t)``; the replies come back as
    :class:`~fedram_flwr.protocol.ClientReply` in partition-id order;
    ``aggregate(state, t, replies, elapsed)`` gives the next state (an :class:`Outcome`);
    the model is evaluated on ``evaluated(arrays)[0]``.

    A core is internal: it takes the replies the round driver
    (:func:`~fedram_flwr.strategies.round_driver.drive_round`) has screened (partition ids
    unique and known, arrays and metrics finite) and sorted; it does not check them again
    (a duplicated id would count twice, a NaN would spread). Call cores through the
    driver, as every adapter of both Flower APIs does.

    ``late_updates`` says how a client's update that arrives after its round (a round
    policy's ``late: keep``, :mod:`fedram_flwr.clock.policy`) can enter a later round:
    ``None``, it cannot (the round driver drops it); ``"rebase"``, the core reads an
    update as the difference between the current model and the reply, so the driver
    hands it the reply re-based on the current model (current + reply - model sent);
    ``"as-sent"``, the core keeps the model it sent each client and reads the reply
    against it (FedAWE).
    """

    late_updates: ClassVar[str | None] = None

    def __post_init__(self) -> None:
        """Check every hyper-parameter against its declaration (errors name the field).

        A core with further rules extends this and calls it first.

        Raises
        ------
        ValueError
            If a field is outside its declared range or values.
        """
        check_hypers(self)

    def for_model(self, initial_arrays: Sequence[np.ndarray]) -> Core[S]:
        """Return this core for a model shaped like ``initial_arrays``.

        The vector cores record its shapes and dtypes; the others need nothing. A
        strategy that learns the model only when it starts (the Message API's
        ``start(initial_arrays=...)``) calls it then.

        Parameters
        ----------
        initial_arrays : sequence of np.ndarray
            The initial model's layers.

        Returns
        -------
        Core
            A core equal to this one but for the model it knows (this one by default).
        """
        return self

    def client_count(self) -> int | None:
        """Return N, the number of clients this core knows by partition id 0..N-1.

        A reply's id is checked against it
        (:func:`~fedram_flwr.strategies.rounds.partition_problems`).

        Returns
        -------
        int or None
            N (by default the ``num_clients`` field, where there is one); ``None``: the
            core keeps nothing per client, so any id >= 0 is taken.
        """
        n = getattr(self, "num_clients", None)
        return n if isinstance(n, int) else None

    def init(self, initial_arrays: Sequence[np.ndarray]) -> S:
        """Return the state before round 1.

        Parameters
        ----------
        initial_arrays : sequence of np.ndarray
            The initial model's layers.

        Returns
        -------
        S
            The state before round 1.
        """
        raise NotImplementedError

    def arrays(self, state: S) -> Arrays:
        """Return what the server broadcasts: the model, and what travels with it.

        Parameters
        ----------
        state : S
            The current state.

        Returns
        -------
        Arrays
            The broadcast arrays (e.g. Fed-CVaR-Avg's (theta, t), SCAFFOLD's (x, c)).
        """
        raise NotImplementedError

    def fit_config(self, state: S, server_round: int) -> dict[str, Any]:
        """Return the fit config sent with the model to every client.

        Parameters
        ----------
        state : S
            The current state.
        server_round : int
            t, >= 1.

        Returns
        -------
        dict of str to Any
            Keys of :mod:`fedram_flwr.protocol` (e.g. ``lr``); empty by default.
        """
        return {}

    def aggregate(
        self, state: S, server_round: int, replies: Sequence[ClientReply], elapsed: int
    ) -> Outcome[S]:
        """Aggregate one round's replies into the next state.

        Parameters
        ----------
        state : S
            The state the round's model was broadcast from.
        server_round : int
            t, >= 1.
        replies : sequence of ClientReply
            The round's replies, in partition-id order (may be empty: nobody was
            available).
        elapsed : int
            Rounds since the last aggregation, >= 1 (> 1 when the server skipped rounds
            in which nobody was available: they still count).

        Returns
        -------
        Outcome
            The next state, the round's diagnostics and whether the model moved.
        """
        raise NotImplementedError

    def kept(self, server_round: int, replies: Sequence[ClientReply]) -> Sequence[int]:
        """Return the positions of the round's ``replies`` to aggregate.

        Asked when the server could not choose who trains before training (``replies`` in
        partition-id order): all of them; FedAvg(S) its seeded subset
        (:func:`~fedram_flwr.strategies.round_driver.drive_round`).
        """
        return range(len(replies))

    def evaluated(self, arrays: Sequence[np.ndarray]) -> tuple[Arrays, dict[str, Any]]:
        """Return the model part of the broadcast arrays, and metrics to report beside it.

        Parameters
        ----------
        arrays : sequence of np.ndarray
            The broadcast arrays (:meth:`arrays`).

        Returns
        -------
        tuple of (Arrays, dict of str to Any)
            The model to evaluate (all the arrays by default) and metrics to report beside
            its evaluation (Fed-CVaR-Avg's t, ...).
        """
        return list(arrays), {}

    def diagnostics(self, state: S) -> dict[str, Any]:
        """Return what a recorder logs of the state.

        Parameters
        ----------
        state : S
            The current state.

        Returns
        -------
        dict of str to Any
            E.g. ``q`` (the last aggregation's weights over all clients) for algorithms
            that weigh clients individually, availability estimates, thresholds; empty by
            default.
        """
        return {}
