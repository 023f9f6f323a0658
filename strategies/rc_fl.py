"""RC-FL (Robust Client-weighted Federated Learning) and its algorithm rFedFair.

"Fairness-aware Federated Learning: A Robust Approach" (anonymous ICML submission;
``papers/rc-fl_fairness-aware-robust.md``), Sections 3-4, Algorithm 1, Lemmas 1-2.

RC-FL minimises the Q_alpha-weighted loss (eq. 1/3): with p_i = m_i / m and a per-client
alpha_i in [p_i, 1],

    f_alpha(omega) = sup_{q in Q_alpha} sum_i q_i p_i f_i(omega),
    Q_alpha = {q : sum_i q_i p_i = 1, 0 <= q_i <= 1 / alpha_i},

which is the heterogeneous CVaR (HCVaR, Def. 2) of the client losses. Lemma 1 gives the
dual f_alpha = inf_eta {eta + sum_i (p_i / alpha_i) (f_i - eta)_+} (eq. 2), so RC-FL is a
joint minimisation over (omega, eta) (eq. 4), smoothed with
phi_mu(x) = mu log(1 + e^{x / mu}) into (eq. 5)

    F^mu(omega, eta) = sum_i p_i f^{mu,i}(omega, eta),
    f^{mu,i}(omega, eta) = (1 / alpha_i) phi_mu(f_i(omega) - eta) + eta,

with F <= F^mu <= F + mu tau_alpha, tau_alpha = sum_i p_i / alpha_i (Lemma 2).
alpha_i = 1 for all i is the FedAvg objective sum_i p_i f_i; alpha_i = p_i is AFL's
max_i f_i (Sec. 3.1).

rFedFair (Alg. 1): each selected client takes kappa gradient steps on f^{mu,i} in
(omega, eta) from the broadcast (omega, eta); the server averages what it receives,
p_i-weighted under full participation, uniformly over K draws with replacement by p_i
under partial participation (Sec. 4); the output is the last iterate and the running
average omega_tilde_T.

Flower's Message API: ``RFedFair`` in :mod:`fedram_flwr.message_api` (same core, same
arguments; ``strategy.start(grid=..., initial_arrays=...)``).

The pure functions (the dual and smoothed objectives, per-client values, the draws) are in
:mod:`~fedram_flwr.strategies.rc_fl_math`, re-exported here; this module holds the core
and the Flower adapter.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, TypeVar

import numpy as np
from flwr.common import (
    FitIns,
    Parameters,
    Scalar,
    parameters_to_ndarrays,
)
from flwr.server.client_manager import ClientManager
from flwr.server.client_proxy import ClientProxy

from fedram_flwr.objectives import (
    check_alpha,
    hcvar,
    rcfl_gradient_weights,
    rcfl_local_objective,
    sigmoid,
    softplus_mu,
)
from fedram_flwr.protocol import (
    LR_ETA,
    RCFL_ALPHA,
    RCFL_MU,
    RCFL_P,
    THRESHOLD_ETA,
    Arrays,
    ClientReply,
    join_theta_t,
    split_theta_t,
)
from fedram_flwr.strategies.base import CoreStrategy
from fedram_flwr.strategies.core import Core, Outcome
from fedram_flwr.strategies.fedavg import weighted_average
from fedram_flwr.strategies.hyper import hyper
from fedram_flwr.strategies.rc_fl_math import draw_with_replacement
from fedram_flwr.strategies.rc_fl_math import per_client as per_client
from fedram_flwr.strategies.rc_fl_math import rcfl_dual as rcfl_dual
from fedram_flwr.strategies.rc_fl_math import rcfl_smoothed as rcfl_smoothed

N = TypeVar("N", bound=Hashable)  # a node's name (a proxy's cid, a Message-API node id)

__all__ = [
    "RFedFair",
    "RFedFairCore",
    "check_alpha",
    "hcvar",
    "rcfl_gradient_weights",
    "rcfl_local_objective",
    "sigmoid",
    "softplus_mu",
]


# ------------------------------------------------------------------------ core
@dataclass(frozen=True, eq=False)
class RFedFairState:
    """rFedFair's server state (Alg. 1).

    Parameters
    ----------
    arrays : Arrays
        The global (omega, eta) as broadcast: omega's arrays, then eta as a 1-element
        array.
    omega_sum : list of np.ndarray or None
        The running sum of the broadcast omegas, float64 (``None`` before round 1).
    averaged_rounds : int
        How many omegas are summed, >= 0 (omega_tilde_T = omega_sum / T).
    multiplicity : dict of int to int
        The round's draw: partition id -> times drawn, >= 1.
    """

    arrays: Arrays
    omega_sum: list[np.ndarray] | None = None
    averaged_rounds: int = 0
    multiplicity: dict[int, int] = field(default_factory=dict)


@dataclass(frozen=True, eq=False, kw_only=True)
class RFedFairCore(Core[RFedFairState]):
    """rFedFair's server (RC-FL paper, Alg. 1).

    alpha (one value or one per client), mu, beta_eta (``lr_eta``), eta's start, K
    (``clients_per_round``; ``None``: full participation) and the seed of the draws.
    """

    alpha: tuple[float, ...] = hyper(
        (0.5,),
        doc="alpha_i, one value for every client or one per client, each in [p_i, 1] "
        "(p_i = m_i / m; checked against the data when the run starts)",
        lo=0.0,
        hi=1.0,
        lo_open=True,
    )
    mu: float = hyper(0.01, doc="mu, the smoothing of phi_mu (Sec. 4)", lo=0.0, lo_open=True)
    lr_eta: float = hyper(
        doc="beta_eta, eta's step size (Alg. 1's beta)", lo=0.0, run_default="training-lr"
    )
    eta_init: float = hyper(0.0, doc="eta before round 1")
    clients_per_round: int | None = hyper(
        None,
        doc="K, draws with replacement by p_i a round (None: full participation)",
        lo=1,
    )
    seed: int = hyper(0, doc="the seed of the draws (with the round)", run="seed")

    def __post_init__(self) -> None:
        """Check the hyper-parameters; hold alpha as a float array."""
        super().__post_init__()
        object.__setattr__(self, "alpha", np.atleast_1d(np.asarray(self.alpha, dtype=float)))

    def client_count(self) -> int | None:
        """Return N when alpha has one value per client, else ``None``."""
        return self.alpha.size if self.alpha.size > 1 else None  # one alpha_i per client

    def init(self, initial_arrays: Sequence[np.ndarray]) -> RFedFairState:
        """Start from (omega_0, ``eta_init``)."""
        return RFedFairState(join_theta_t(initial_arrays, self.eta_init))

    def arrays(self, state: RFedFairState) -> Arrays:
        """Broadcast (omega, eta)."""
        return state.arrays

    def alpha_of(self, pid: int) -> float:
        """Return alpha_i of partition ``pid`` (one alpha for all, or one per client).

        Raises
        ------
        ValueError
            If alpha has one value per client and none for ``pid``.
        """
        if self.alpha.size == 1:
            return float(self.alpha[0])
        if pid >= self.alpha.size:
            raise ValueError(
                f"algorithm.params.alpha: has {self.alpha.size} values, no alpha for client {pid}"
            )
        return float(self.alpha[pid])

    def broadcast(self, state: RFedFairState, arrays: Sequence[np.ndarray]) -> RFedFairState:
        """Return the state once ``arrays`` is broadcast: its omega added to omega_tilde's sum."""
        omega, _ = split_theta_t(arrays)
        total = state.omega_sum
        if total is None:
            total = [np.zeros(a.shape, np.float64) for a in omega]
        total = [acc + a for acc, a in zip(total, omega, strict=True)]
        return replace(state, omega_sum=total, averaged_rounds=state.averaged_rounds + 1)

    def select(
        self, state: RFedFairState, p: dict[int, float], available: Sequence[int], server_round: int
    ) -> tuple[RFedFairState, dict[int, dict[str, Any]]]:
        """Choose Z of Alg. 1 among the available clients.

        All of them (full participation), or K draws with replacement by p renormalised
        over them (:func:`draw_with_replacement`).

        Parameters
        ----------
        state : RFedFairState
            The state before the draw.
        p : dict of int to float
            p_i = m_i / m of every client seen, by partition id.
        available : sequence of int
            The available partition ids, sorted.
        server_round : int
            t, >= 1.

        Returns
        -------
        tuple of (RFedFairState, dict of int to dict)
            The state with the draw, and each chosen client's fit config (its alpha_i,
            p_i, mu, beta_eta).

        Raises
        ------
        ValueError
            If some alpha_i is outside [p_i, 1].
        """
        alpha = {pid: self.alpha_of(pid) for pid in p}
        check_alpha(list(alpha.values()), list(p.values()), "algorithm.params.alpha")
        if self.clients_per_round is None:
            multiplicity = {pid: 1 for pid in available}
        else:
            probs = np.array([p[pid] for pid in available])
            drawn = draw_with_replacement(probs, self.clients_per_round, self.seed, server_round)
            multiplicity = {available[k]: c for k, c in drawn.items()}
        configs = {
            pid: {RCFL_ALPHA: alpha[pid], RCFL_P: p[pid], RCFL_MU: self.mu, LR_ETA: self.lr_eta}
            for pid in available
            if pid in multiplicity
        }
        return replace(state, multiplicity=multiplicity), configs

    def fit_configs(
        self,
        state: RFedFairState,
        partition_of: Mapping[N, int],
        sizes: Mapping[int, int],
        server_round: int,
    ) -> tuple[RFedFairState, list[tuple[N, dict[str, Any]]]]:
        """Draw Z of the round among the available nodes ``partition_of``.

        ``partition_of``: node -> partition id (any node names); p_i = m_i / m over
        ``sizes`` (partition id -> m_i of every client known). Returns the state with
        the draw, and (node, its fit config) for each chosen node in partition-id order
        (:meth:`select`). Both Flower faces send exactly these.
        """
        m = sum(sizes.values())
        p = dict(sorted((pid, size / m) for pid, size in sizes.items()))
        nodes = sorted(partition_of, key=partition_of.__getitem__)
        pids = [partition_of[node] for node in nodes]
        state, configs = self.select(state, p, pids, server_round)
        return state, [(node, configs[pid]) for node, pid in zip(nodes, pids) if pid in configs]

    def aggregate(
        self, state: RFedFairState, server_round: int, replies: Sequence[ClientReply], elapsed: int
    ) -> Outcome[RFedFairState]:
        """Average the returned (omega, eta).

        The p_i-weighted average of the returns (full), or their mean with a client
        drawn c times counted c times (partial).
        """
        if not replies:
            return Outcome(state, {}, aggregated=False)
        full = self.clients_per_round is None
        weighted = [
            (r.arrays(), r.num_examples if full else state.multiplicity[r.partition_id])
            for r in replies
        ]
        new = weighted_average(weighted)
        return Outcome(replace(state, arrays=new), {THRESHOLD_ETA: float(new[-1].reshape(-1)[0])})

    def averaged_omega(self, state: RFedFairState) -> Arrays | None:
        """Return omega_tilde_T: the mean of the omegas broadcast so far (None before round 1)."""
        if state.omega_sum is None:
            return None
        return [(s / state.averaged_rounds).astype(np.float32) for s in state.omega_sum]

    def evaluated(self, arrays: Sequence[np.ndarray]) -> tuple[Arrays, dict[str, Any]]:
        """Evaluate omega only; report eta beside it."""
        omega, eta = split_theta_t(arrays)
        return omega, {THRESHOLD_ETA: eta}

    def diagnostics(self, state: RFedFairState) -> dict[str, Any]:
        """Log the global eta."""
        return {THRESHOLD_ETA: split_theta_t(state.arrays)[1]}


# ------------------------------------------------------------------ Flower adapter
class RFedFair(CoreStrategy):
    """rFedFair (RC-FL paper, Alg. 1) as a Flower Strategy over :class:`RFedFairCore`.

    Global parameters are omega's arrays followed by eta as a 1-element array (the
    layout of :func:`~fedram_flwr.protocol.join_theta_t`). Each round every available
    client (full participation) or K draws with replacement by p_i
    (``clients_per_round=K``) receive (omega, eta) and a fit config with ``rcfl-alpha``
    (their alpha_i), ``rcfl-p`` (p_i), ``rcfl-mu`` and ``lr-eta``; they return
    (omega, eta) after kappa local steps on f^{mu,i} (``RCFLClient``). The new global
    (omega, eta) is the p_i-weighted average of the returns (full), or their mean with a
    client drawn c times counted c times (partial; its local steps are deterministic
    given (round, client), so one fit stands for its c copies).

    Who is sampled is the *server's* choice in the paper (Alg. 1: "server chooses a set
    of clients Z"), with every client reachable; so the strategy draws Z among the
    clients the ClientManager makes available, and an availability oracle (which models
    who can be reached) stays independent of it. Under restricted availability Z is
    drawn among the available clients with p renormalised over them.

    Clients must answer ``get_properties`` with ``partition-id`` (to index ``alpha``
    and make the draws engine-independent) and ``num-examples`` (m_i, giving
    p_i = m_i / m over all connected clients), and report ``partition-id`` in their fit
    metrics. eta lives in the global parameters (Alg. 1 averages and broadcasts it), so
    clients keep no state between rounds. ``evaluate_fn`` sees omega only; the reported
    metrics add ``eta`` and, under ``avg-``, the metrics of the running average
    omega_tilde_T = mean of the global omegas broadcast in rounds 1..T (Alg. 1's output,
    at the granularity the server sees: its local iterates stay on the clients).
    """

    core_type = RFedFairCore

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.known: dict[str, tuple[int, int]] = {}  # cid -> (partition id, m_i)

    def configure_fit(
        self, server_round: int, parameters: Parameters, client_manager: ClientManager
    ) -> list[tuple[ClientProxy, FitIns]]:
        """Draw Z among the available clients and send each its own fit config."""
        self.state = self.core.broadcast(self.state, parameters_to_ndarrays(parameters))
        available = client_manager.sample(num_clients=client_manager.num_available())
        every = [*client_manager.all().values(), *available]
        placed = self.placements(client_manager, every, sizes=True)
        self.known.update({cid: (p.partition_id, p.num_examples) for cid, p in placed.items()})
        proxy_of = {proxy.cid: proxy for proxy in available}
        self.state, configs = self.core.fit_configs(
            self.state,
            {cid: self.known[cid][0] for cid in proxy_of},
            dict(self.known.values()),
            server_round,
        )
        base = self.on_fit_config_fn(server_round) if self.on_fit_config_fn else {}
        return [(proxy_of[cid], FitIns(parameters, {**base, **cfg})) for cid, cfg in configs]

    def evaluate(
        self, server_round: int, parameters: Parameters
    ) -> tuple[float, dict[str, Scalar]] | None:
        """Run ``evaluate_fn`` on omega, with eta and the ``avg-`` metrics of omega_tilde_T."""
        result = super().evaluate(server_round, parameters)
        if result is None:
            return None
        loss, metrics = result
        averaged = self.core.averaged_omega(self.state)
        if averaged is not None and (avg := self.evaluate_fn(server_round, averaged, {})):
            metrics["avg-loss"] = avg[0]
            metrics.update({f"avg-{k}": v for k, v in avg[1].items()})
        return loss, metrics
