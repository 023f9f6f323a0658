"""The availability laws, pure: who is active in round r is a function of (seed, r).

Numpy only, no Flower: the oracles (:mod:`fedram_flwr.availability.oracles`) are thin
ClientManager wrappers over these functions. Every draw comes from a named stream of
:mod:`fedram_flwr.rng` seeded by (seed, round), so a law replays exactly in every engine
and after a restart.

- Random Access Model (Fed-CVaR-Avg, Sec. 1-2, Fig. 1): :func:`ram_probabilities`,
  :func:`ram_relay`;
- two-state Markov chains (CA-Fed Sec. III-D, V-A; with lambda = 0 FedAR's Bernoulli
  clients, Sec. 6.1): in :mod:`fedram_flwr.availability.markov`;
- cyclic windows: :func:`evenly_spread_phases`, :func:`group_phases`, :func:`cyclic_active`;
- the connected SuperNodes' subsample: :func:`connected_sample`.

:class:`HiddenLaw` is what an oracle hides from strategies (its ``hidden_law()``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from fedram_flwr.availability.markov import contiguous_clusters
from fedram_flwr.rng import stream


@dataclass(frozen=True, eq=False)  # arrays: compare the fields, not the values
class HiddenLaw:
    """The parameters an oracle hides from strategies.

    Read only by plots, the recorder's estimator errors, and strategies a scenario runs
    "oracle-informed".

    Parameters
    ----------
    pi : np.ndarray
        Shape (K,), probabilities in [0, 1]: ``pi[k]`` is client k's long-run
        availability, i.e. its probability of being active in a round (for the RAM:
        rho_k, the categorical relay law, which is that probability when one client is
        relayed per round).
    lam : np.ndarray or None
        Shape (K,), in [lambda_min(pi_k), 1): ``lam[k]`` is the lag-1 autocorrelation
        lambda_k of client k's two-state Markov chain, for the Markov-type oracles
        (markov, clustered, bernoulli); None where the law is no such chain.
    """

    pi: np.ndarray
    lam: np.ndarray | None = None


# ------------------------------------------------------------- Random Access Model
def ram_probabilities(
    num_clients: int,
    num_rare: int,
    rng: np.random.Generator,
    rare_rho: Sequence[float] | None = None,
) -> np.ndarray:
    """Generate the RAM law rho of the Fed-CVaR-Avg paper's experiments.

    rho_i ~ U(0, 1) normalised, sorted so the ``num_rare`` least likely users are the
    last ids.

    Parameters
    ----------
    num_clients : int
        K, the number of clients, >= 1.
    num_rare : int
        How many of them are rare (the last ids), in 0..K.
    rng : np.random.Generator
        Source of the uniforms.
    rare_rho : sequence of float, optional
        Pins the rare users' probabilities (Table 1: 0.0107, 0.0078, 0.0053); the
        others then share the rest, each above the largest rare one.

    Returns
    -------
    np.ndarray
        rho, shape (K,): probabilities summing to 1, in descending order.

    Raises
    ------
    ValueError
        If ``rare_rho`` does not hold ``num_rare`` values, or the values plus
        (K - num_rare) x their max reach 1.
    """
    if rare_rho is None:
        u = rng.uniform(size=num_clients)
        return np.sort(u / u.sum())[::-1].copy()
    rare = np.sort(np.asarray(rare_rho, dtype=float))[::-1]
    k_f = num_clients - len(rare)
    spare = 1.0 - rare.sum() - k_f * rare.max()
    if len(rare) != num_rare or spare <= 0:
        raise ValueError(
            f"availability.params.rare_rho: need {num_rare} values whose sum plus "
            f"{k_f} x their max stays below 1, got {list(rare_rho)}"
        )
    u = rng.uniform(size=k_f)
    frequent = rare.max() + spare * u / u.sum()
    return np.concatenate([np.sort(frequent)[::-1], rare])


def ram_relay(rho: np.ndarray, m: int, seed: int, server_round: int) -> list[int]:
    """Draw the clients the RAM relays in one round (Fed-CVaR-Avg Sec. 1-2, Fig. 1).

    m distinct clients by rho, i.i.d. across rounds, from the ``ram-relay`` stream.

    Parameters
    ----------
    rho : np.ndarray
        The categorical law over the K clients: probabilities summing to 1.
    m : int
        Clients relayed per round, in 1..(number of clients with rho > 0).
    seed, server_round : int
        The scenario seed and the server round (>= 1) that seed the draw.

    Returns
    -------
    list of int
        The relayed client ids, ascending.
    """
    rng = stream("ram-relay", seed, server_round)
    return sorted(int(i) for i in rng.choice(len(rho), size=m, replace=False, p=rho))


# ------------------------------------------------------------------------- cyclic
def evenly_spread_phases(num_clients: int, period: int) -> np.ndarray:
    """Compute the default phases: client k starts its window at round k P // N + 1.

    Parameters
    ----------
    num_clients : int
        N, >= 1.
    period : int
        P, in rounds, >= 1.

    Returns
    -------
    np.ndarray
        Shape (N,): phases in 0..P-1.
    """
    return np.arange(num_clients) * period // num_clients


def cyclic_active(server_round: int, period: int, window: int, phase: np.ndarray) -> np.ndarray:
    """Flag the clients active in ``server_round`` under cyclic availability.

    Client k is active in the rounds r with (r - 1 - phase_k) mod period < window:
    ``window`` consecutive rounds of every ``period``, starting at round phase_k + 1.

    Parameters
    ----------
    server_round : int
        Server round, >= 1.
    period, window : int
        P and w, in rounds: 1 <= w <= P.
    phase : np.ndarray
        Each client's phase, in 0..P-1.

    Returns
    -------
    np.ndarray
        Shape of ``phase``, bool.
    """
    return (server_round - 1 - phase) % period < window


def group_phases(num_clients: int, period: int, groups: int) -> np.ndarray:
    """Return the phases of ``groups`` equal contiguous blocks of ids taking turns.

    Block g starts its window at round g P // G + 1 (Crawshaw and Liu's periodic
    participation, whose authors' code makes 5 contiguous groups, each active P/5 rounds
    of every P).

    Parameters
    ----------
    num_clients : int
        N, >= 1.
    period : int
        P, in rounds, >= 1.
    groups : int
        G, the number of blocks, in 1..N.

    Returns
    -------
    np.ndarray
        Each client's phase, in 0..P-1 (:func:`cyclic_active`).
    """
    return contiguous_clusters(num_clients, groups) * period // groups


# -------------------------------------------------------------------- connected
def connected_sample(
    connected: Sequence[int],
    m: int | None,
    seed: int,
    server_round: int,
    stream_name: str = "connected-sample",
) -> list[int]:
    """Choose the ids relayed in ``server_round`` among the connected ones.

    All ``connected`` ones, or ``m`` of them drawn uniformly without replacement from
    the ``stream_name`` stream seeded by (seed, round) (the cyclic oracle's subsample
    uses ``cyclic-sample``).

    Parameters
    ----------
    connected : sequence of int
        Partition ids of the connected clients.
    m : int or None
        How many to relay, >= 1; None: all of them.
    seed, server_round : int
        The scenario seed and the server round (>= 1) that seed the draw.
    stream_name : str
        The named stream of :mod:`fedram_flwr.rng` the draw comes from.

    Returns
    -------
    list of int
        The relayed ids, ascending.
    """
    ids = sorted(int(i) for i in connected)
    if m is None or len(ids) <= m:
        return ids
    rng = stream(stream_name, seed, server_round)
    return sorted(int(i) for i in rng.choice(ids, size=m, replace=False))
