"""The emulated availability oracles: thin ClientManagers over the laws.

The laws are :mod:`fedram_flwr.availability.laws`'s and
:mod:`fedram_flwr.availability.markov`'s; each oracle is registered by short
name in the registry.

- ``ram``: Random Access Model (Fed-CVaR-Avg), m clients per round drawn by rho;
- ``bernoulli``: client k active with probability p_k, independently (FedAR Sec. 6.1);
- ``markov``: a two-state Markov chain per client with stationary availability pi_k and
  correlation lambda_k (CA-Fed Sec. III-D, V-A);
- ``clustered``: one such chain per cluster switches all its clients (CA-Fed V-B e);
- ``cyclic``: client k active in a window of each period;
- ``trace``: replay of a recorded round x client matrix (:mod:`.traces`).

They emulate availability on top of the connected nodes (they wait for all of them);
:mod:`.connected` passes the devices' own availability through. All but the RAM relay
*every* active client: the strategy decides their weights.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from fedram_flwr.availability.laws import HiddenLaw, connected_sample, cyclic_active, ram_relay
from fedram_flwr.availability.manager import AvailabilityError, OracleClientManager
from fedram_flwr.availability.markov import MarkovChains, check_markov_law


class RandomAccessClientManager(OracleClientManager):
    """Random Access Model (Fed-CVaR-Avg paper, Sec. 1-2, Fig. 1).

    A fixed categorical law rho over the K clients, independent across rounds, relaying
    ``m`` clients per round (m = 1 by default) whatever number the strategy asks for
    (:func:`~fedram_flwr.availability.laws.ram_relay`).

    Parameters
    ----------
    rho : sequence of float
        rho_k, shape (K,): non-negative, summing to 1 (within 1e-6; renormalised).
    seed : int
        The scenario seed the draws come from.
    clients_per_round : int
        m, in 1..(number of clients with rho > 0).
    wait_timeout : float
        Seconds, >= 0: the longest a wait for clients to connect lasts.

    Raises
    ------
    ValueError
        If rho is not a probability vector or ``clients_per_round`` is out of range.
    """

    def __init__(
        self,
        rho: Sequence[float],
        seed: int,
        *,
        clients_per_round: int = 1,
        wait_timeout: float = 120.0,
    ) -> None:
        rho = np.asarray(rho, dtype=float)
        if rho.ndim != 1 or not np.all(rho >= 0) or not abs(rho.sum() - 1.0) <= 1e-6:  # NaN
            raise ValueError(
                f"availability.params.rho: must be non-negative and sum to 1 "
                f"(sums to {rho.sum():.6g})"
            )
        if not 1 <= clients_per_round <= np.count_nonzero(rho):
            raise ValueError(
                f"availability.params.clients_per_round: {clients_per_round} must be in "
                f"1..{np.count_nonzero(rho)} (clients with rho > 0)"
            )
        super().__init__(len(rho), seed, wait_timeout=wait_timeout)
        self._rho = rho / rho.sum()
        self.clients_per_round = clients_per_round

    @property
    def rho(self) -> np.ndarray:
        """The hidden law rho, a copy (for plots and tests; strategies never read it)."""
        return self._rho.copy()

    def hidden_law(self) -> HiddenLaw:
        """Return rho as ``pi`` (no chain: draws are independent across rounds)."""
        return HiddenLaw(self.rho)

    def draw(self, server_round: int) -> list[int]:
        """Return the ``clients_per_round`` ids the RAM relays in ``server_round`` (>= 1)."""
        return ram_relay(self._rho, self.clients_per_round, self.seed, server_round)


class MarkovClientManager(OracleClientManager):
    """Two-state Markov availability (CA-Fed Sec. III-D, V-A).

    Chain j is active in round 1 with probability pi_j (the stationary law), then moves
    with P(1->1) = lambda_j + (1 - lambda_j) pi_j and P(0->1) = (1 - lambda_j) pi_j; its
    lag-1 autocorrelation is lambda_j. Client k follows chain ``cluster_of[k]`` (default:
    its own chain; shared chains are CA-Fed V-B e's spatial correlation). Every active
    client is relayed.
    The chains' states are :class:`~fedram_flwr.availability.markov.MarkovChains`'s: a
    pure function of (seed, round), in any access order.

    Parameters
    ----------
    pi : sequence of float
        Each chain's stationary availability pi_j, in [0, 1].
    lam : sequence of float
        Each chain's lag-1 autocorrelation lambda_j, in [lambda_min(pi_j), 1).
    seed : int
        The scenario seed the chains step with.
    cluster_of : sequence of int, optional
        Client k's chain, in 0..J-1; one entry per client. None: one chain per client.
    wait_timeout : float
        Seconds, >= 0: the longest a wait for clients to connect lasts.

    Raises
    ------
    ValueError
        Naming the entry, if a chain is invalid or ``cluster_of`` names no chain.
    """

    def __init__(
        self,
        pi: Sequence[float],
        lam: Sequence[float],
        seed: int,
        *,
        cluster_of: Sequence[int] | None = None,
        wait_timeout: float = 120.0,
    ) -> None:
        pi, lam = np.asarray(pi, dtype=float), np.asarray(lam, dtype=float)
        check_markov_law(pi, lam)
        chains = np.arange(pi.size) if cluster_of is None else np.asarray(cluster_of)
        bad = np.flatnonzero((chains < 0) | (chains >= pi.size))
        if bad.size:
            raise ValueError(
                f"availability.params.cluster_of[{bad[0]}]: {chains[bad[0]]} is not a "
                f"cluster; allowed values: 0..{pi.size - 1}"
            )
        super().__init__(chains.size, seed, wait_timeout=wait_timeout)
        self._chains, self._chain_of = MarkovChains(pi, lam, seed), chains

    def hidden_law(self) -> HiddenLaw:
        """Return each client's stationary availability pi_k and correlation lambda_k.

        Both are its chain's.
        """
        return HiddenLaw(self._chains.pi[self._chain_of], self.lam)

    @property
    def lam(self) -> np.ndarray:
        """Each client's correlation lambda_k (``hidden_law().lam``)."""
        return self._chains.lam[self._chain_of]

    def chain_states(self, server_round: int) -> np.ndarray:
        """Return the active flags of the chains (not clients) in ``server_round`` (>= 1)."""
        return self._chains.states(server_round)

    def draw(self, server_round: int) -> list[int]:
        """Return the clients whose chain is active in ``server_round`` (>= 1)."""
        return np.flatnonzero(self.chain_states(server_round)[self._chain_of]).tolist()


class BernoulliClientManager(MarkovClientManager):
    """Independent Bernoulli availability (FedAR Sec. 6.1).

    Client k is active in every round with probability p_k, independently: the Markov
    chain with lambda = 0.

    Parameters
    ----------
    p : sequence of float
        p_k, probabilities in [0, 1], one per client.
    seed : int
        The scenario seed the draws come from.
    wait_timeout : float
        Seconds, >= 0: the longest a wait for clients to connect lasts.

    Raises
    ------
    ValueError
        Naming the entry, if a p_k is outside [0, 1].
    """

    def __init__(self, p: Sequence[float], seed: int, *, wait_timeout: float = 120.0) -> None:
        p = np.asarray(p, dtype=float)
        check_markov_law(p, np.zeros_like(p), pi_field="availability.params.p")
        super().__init__(p, np.zeros_like(p), seed, wait_timeout=wait_timeout)


class CyclicClientManager(OracleClientManager):
    """Cyclic availability: client k is active ``window`` rounds of every ``period``.

    Shifted by its phase. Every active client is relayed, or with ``clients_per_round``
    m of them drawn uniformly from the ``cyclic-sample`` stream (Crawshaw and Liu's
    periodic participation samples S of the active group). Without m the law is
    deterministic: long-run availability w / P, lag-1 autocorrelation
    1 - P / (w (P - w)) when 0 < w < P
    (:func:`~fedram_flwr.availability.laws.cyclic_active`).

    Parameters
    ----------
    phase : sequence of int
        Each client's phase, in 0..P-1: its window starts at round phase_k + 1.
    period, window : int
        P and w, in rounds: P >= 1, 1 <= w <= P.
    seed : int
        The scenario seed (the subsample's draws; unused without ``clients_per_round``).
    wait_timeout : float
        Seconds, >= 0: the longest a wait for clients to connect lasts.
    clients_per_round : int, optional
        m >= 1: how many of the active clients are relayed (None: all).

    Raises
    ------
    ValueError
        If the window, period or a phase is out of range.
    """

    def __init__(
        self,
        phase: Sequence[int],
        period: int,
        window: int,
        seed: int,
        *,
        clients_per_round: int | None = None,
        wait_timeout: float = 120.0,
    ) -> None:
        phase = np.asarray(phase, dtype=int)
        if period < 1 or not 1 <= window <= period:
            raise ValueError(
                f"availability.params.window: {window} must be in 1..period "
                f"(availability.params.period = {period}, at least 1)"
            )
        bad = np.flatnonzero((phase < 0) | (phase >= period))
        if bad.size:
            raise ValueError(
                f"availability.params.phase[{bad[0]}]: {phase[bad[0]]} is outside 0..{period - 1}"
            )
        super().__init__(phase.size, seed, wait_timeout=wait_timeout)
        if clients_per_round is not None and clients_per_round < 1:
            raise ValueError(
                f"availability.params.clients_per_round: {clients_per_round} must be >= 1"
            )
        self.period, self.window, self._phase = period, window, phase
        self.clients_per_round = clients_per_round

    def hidden_law(self) -> HiddenLaw:
        """Return each client's long-run probability of being relayed.

        Over one period, the mean of 1{active} min(1, m / |active|) (w / P without m;
        no Markov chain, no lambda).
        """
        pi = np.zeros(self.num_clients)
        for r in range(1, self.period + 1):
            active = cyclic_active(r, self.period, self.window, self._phase)
            m = self.clients_per_round or active.sum()
            pi += active * min(1.0, m / max(active.sum(), 1))
        return HiddenLaw(pi / self.period)

    def draw(self, server_round: int) -> list[int]:
        """Return the clients relayed in ``server_round`` (>= 1): the active ones, or m."""
        active = np.flatnonzero(cyclic_active(server_round, self.period, self.window, self._phase))
        return connected_sample(
            active, self.clients_per_round, self.seed, server_round, "cyclic-sample"
        )


class TraceClientManager(OracleClientManager):
    """Replay a recorded availability matrix (rounds x clients).

    Round r relays the clients active in row r - 1. Past the last row it raises, or
    wraps around when ``wrap`` (the seed is unused).

    Parameters
    ----------
    matrix : np.ndarray
        Rounds x clients, bool (:func:`~fedram_flwr.availability.traces.read_trace`).
    seed : int
        Unused.
    wrap : bool
        Replay from the first row past the last one, instead of raising.
    wait_timeout : float
        Seconds, >= 0: the longest a wait for clients to connect lasts.
    """

    def __init__(
        self, matrix: np.ndarray, seed: int, *, wrap: bool = False, wait_timeout: float = 120.0
    ) -> None:
        matrix = np.asarray(matrix, dtype=bool)
        super().__init__(matrix.shape[1], seed, wait_timeout=wait_timeout)
        self._matrix, self.wrap = matrix, wrap
        self.num_rounds = len(matrix)

    def hidden_law(self) -> HiddenLaw:
        """Return each client's active fraction over the trace (no lambda)."""
        return HiddenLaw(self._matrix.mean(axis=0))

    def draw(self, server_round: int) -> list[int]:
        """Return the clients active in row ``server_round - 1`` of the trace.

        Raises
        ------
        AvailabilityError
            If ``server_round`` is past the trace's end and ``wrap`` is False.
        """
        if server_round > self.num_rounds and not self.wrap:
            raise AvailabilityError(
                f"round {server_round} is past the end of the trace ({self.num_rounds} "
                "rounds); set availability.params.past_end: wrap to replay it from the start"
            )
        return np.flatnonzero(self._matrix[(server_round - 1) % self.num_rounds]).tolist()
