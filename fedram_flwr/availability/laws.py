"""The availability laws, pure: who is active in round r is a function of (seed, r).

Numpy only, no Flower: the oracles (:mod:`fedram_flwr.availability.oracles`) are thin
ClientManager wrappers over these functions. Every draw comes from a named stream of
:mod:`fedram_flwr.rng` seeded by (seed, round), so a law replays exactly in every engine
and after a restart.

- Random Access Model (Fed-CVaR-Avg, Sec. 1-2, Fig. 1): :func:`ram_probabilities`,
  :func:`ram_relay`;
- two-state Markov chains (CA-Fed Sec. III-D, V-A; with lambda = 0 FedAR's Bernoulli
  clients, Sec. 6.1): :func:`markov_activation`, :func:`markov_step`,
  :class:`MarkovChains`, and the paper's generators of (pi, lambda);
- cyclic windows: :func:`evenly_spread_phases`, :func:`group_phases`, :func:`cyclic_active`;
- the connected SuperNodes' subsample: :func:`connected_sample`.

:class:`HiddenLaw` is what an oracle hides from strategies (its ``hidden_law()``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from fedram_flwr.rng import stream


@dataclass(frozen=True, eq=False)  # arrays: compare the fields, not the values
class HiddenLaw:
    """The parameters an oracle hides from strategies (read only by plots, the recorder's
    estimator errors, and strategies a scenario runs "oracle-informed").

    ``pi[k]``: client k's long-run availability, i.e. its probability of being active
    in a round (for the RAM: rho_k, the categorical relay law, which is that probability
    when one client is relayed per round). ``lam[k]``: the lag-1 autocorrelation lambda_k
    of client k's two-state Markov chain, for the Markov-type oracles (markov, clustered,
    bernoulli); None where the law is no such chain."""

    pi: np.ndarray
    lam: np.ndarray | None = None


# ------------------------------------------------------------- Random Access Model
def ram_probabilities(
    num_clients: int,
    num_rare: int,
    rng: np.random.Generator,
    rare_rho: Sequence[float] | None = None,
) -> np.ndarray:
    """RAM law as in the paper's experiments: rho_i ~ U(0, 1) normalised, sorted so the
    ``num_rare`` least likely users are the last ids. ``rare_rho`` pins those users'
    probabilities (Table 1: 0.0107, 0.0078, 0.0053); the others then share the rest,
    each above the largest rare one."""
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
    """The RAM's draw for one round: m distinct clients, i.i.d. across rounds, by rho."""
    rng = stream("ram-relay", seed, server_round)
    return sorted(int(i) for i in rng.choice(len(rho), size=m, replace=False, p=rho))


# ------------------------------------------------- Markov chains (CA-Fed, Bernoulli)
def markov_lambda_min(pi: np.ndarray) -> np.ndarray:
    """Smallest lambda for which P(1->1) = lambda + (1 - lambda) pi and
    P(0->1) = (1 - lambda) pi are probabilities: -min(pi, 1 - pi) / max(pi, 1 - pi)."""
    pi = np.asarray(pi, dtype=float)
    return -np.minimum(pi, 1 - pi) / np.maximum(pi, 1 - pi)


def check_markov_law(
    pi: np.ndarray,
    lam: np.ndarray,
    *,
    pi_field: str = "availability.params.pi",
    lam_field: str = "availability.params.lam",
) -> None:
    """Raise ValueError, naming the field and entry, unless every chain is valid:
    pi in [0, 1] and lambda in [lambda_min(pi), 1) (lambda = 1 never switches)."""
    if pi.ndim != 1 or pi.shape != lam.shape:
        raise ValueError(f"{lam_field}: has {lam.size} entries, {pi_field} has {pi.size}")
    bad = np.flatnonzero(~((pi >= 0) & (pi <= 1)))  # NaN too
    if bad.size:
        k = bad[0]
        raise ValueError(f"{pi_field}[{k}]: {pi[k]:g} is outside the allowed range [0, 1]")
    lo = markov_lambda_min(pi)
    bad = np.flatnonzero(~((lam >= lo) & (lam < 1)))  # NaN too
    if bad.size:
        k = bad[0]
        raise ValueError(
            f"{lam_field}[{k}]: {lam[k]:g} is outside the allowed range [{lo[k]:.4g}, 1) "
            f"for pi = {pi[k]:g} (P(1->1) and P(0->1) must be probabilities; "
            "lambda = 1 would never switch)"
        )


def fedar_spread(num_clients: int, p_min: float) -> np.ndarray:
    """Bernoulli p_k "varying from p_min to 1" (FedAR Sec. 6.1, which gives no more
    detail): evenly spaced from 1 (client 0) down to p_min (the last client)."""
    return np.linspace(1.0, p_min, num_clients)


def markov_activation(pi: np.ndarray, lam: np.ndarray, state: np.ndarray | None) -> np.ndarray:
    """P(active next round | state) = lambda * state + (1 - lambda) pi, i.e.
    P(1->1) = lambda + (1 - lambda) pi and P(0->1) = (1 - lambda) pi (CA-Fed Sec. V-A,
    second eigenvalue lambda); the stationary pi when there is no previous state."""
    return pi if state is None else lam * state + (1 - lam) * pi


def markov_step(
    pi: np.ndarray, lam: np.ndarray, state: np.ndarray | None, seed: int, server_round: int
) -> np.ndarray:
    """The chains' states in ``server_round`` given those of the round before (None
    before round 1): chain j is active when its uniform from the (seed, round) stream
    falls below :func:`markov_activation`."""
    u = stream("markov-step", seed, server_round).random(pi.size)
    return u < markov_activation(pi, lam, state)


class MarkovChains:
    """Independent two-state chains (pi_j, lambda_j): their states in round r are a pure
    function of (seed, r). Rounds are stepped in order once (:func:`markov_step`) and
    cached as packed bits: O(chains) per new round, any access order."""

    def __init__(self, pi: np.ndarray, lam: np.ndarray, seed: int) -> None:
        self.pi, self.lam, self.seed = pi, lam, seed
        self._bits: list[np.ndarray] = []  # packed chain states of rounds 1, 2, ...
        self._state: np.ndarray | None = None  # chain states of the last stepped round

    def states(self, server_round: int) -> np.ndarray:
        """Active flags of the chains in ``server_round`` (>= 1)."""
        if server_round < 1:
            raise ValueError(f"rounds start at 1, got {server_round}")
        while len(self._bits) < server_round:
            self._state = markov_step(
                self.pi, self.lam, self._state, self.seed, len(self._bits) + 1
            )
            self._bits.append(np.packbits(self._state))
        return np.unpackbits(self._bits[server_round - 1], count=self.pi.size).astype(bool)


def ca_fed_markov_law(
    num_clients: int, g: float, nu: float, eps: float, rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray]:
    """(pi, lambda) of the CA-Fed paper's clients (Sec. V-A a): the first half "more
    available" (pi = 1/2 + g), the second half "less available" (pi = 1/2 - g); each half
    splits into "correlated" clients (lambda = nu, first) and "weakly correlated" ones
    (lambda ~ N(0, eps^2), clipped to [lambda_min(pi), 1))."""
    pi = np.empty(num_clients)
    lam = np.empty(num_clients)
    for half, p in zip(np.array_split(np.arange(num_clients), 2), (0.5 + g, 0.5 - g)):
        correlated, weak = np.array_split(half, 2)
        pi[half] = p
        lam[correlated] = nu
        lam[weak] = eps * rng.standard_normal(weak.size)
    lam = np.clip(lam, markov_lambda_min(pi), np.nextafter(1.0, 0.0))
    return pi, lam


def ca_fed_cluster_law(num_clusters: int, g: float) -> tuple[np.ndarray, np.ndarray]:
    """(pi_c, lambda_c) of the CA-Fed spatial-correlation experiment (Sec. V-B e): the
    first half of the clusters "more available" (pi = 1/2 + g, lambda = 0), the others
    "less available, correlated" (pi = 1/2 - g, lambda_c = c / C); with C = 10, g = 0.4:
    pi = 0.9 for c = 0..4, pi = 0.1 and lambda = 0.5..0.9 for c = 5..9."""
    c = np.arange(num_clusters)
    more = c < (num_clusters + 1) // 2
    return np.where(more, 0.5 + g, 0.5 - g), np.where(more, 0.0, c / num_clusters)


def contiguous_clusters(num_clients: int, num_clusters: int) -> np.ndarray:
    """Cluster of each client: equal contiguous blocks of ids (client k -> k C // N)."""
    return np.arange(num_clients) * num_clusters // num_clients


def label_permutation(pi: np.ndarray, client_classes: Sequence[Sequence[int]]) -> np.ndarray:
    """Label-correlated availability: ``perm`` such that client k takes the generated
    parameters of client ``perm[k]``. Clients in ascending order of the mean id of the
    classes they hold receive the generated parameters in descending order of pi (ties
    keep id order): clients holding lower class ids are more available. Only who gets
    which (pi, lambda) changes, not their values."""
    mean_class = np.array([np.mean(c) for c in client_classes])
    perm = np.empty(len(pi), dtype=int)
    perm[np.argsort(mean_class, kind="stable")] = np.argsort(-np.asarray(pi), kind="stable")
    return perm


# ------------------------------------------------------------------------- cyclic
def evenly_spread_phases(num_clients: int, period: int) -> np.ndarray:
    """Default phases: client k starts its window at round k P // N + 1."""
    return np.arange(num_clients) * period // num_clients


def cyclic_active(server_round: int, period: int, window: int, phase: np.ndarray) -> np.ndarray:
    """Client k is active in the rounds r with (r - 1 - phase_k) mod period < window:
    ``window`` consecutive rounds of every ``period``, starting at round phase_k + 1."""
    return (server_round - 1 - phase) % period < window


def group_phases(num_clients: int, period: int, groups: int) -> np.ndarray:
    """Phases of ``groups`` equal contiguous blocks of ids taking turns: block g starts
    its window at round g P // G + 1 (Crawshaw and Liu's periodic participation, whose
    authors' code makes 5 contiguous groups, each active P/5 rounds of every P)."""
    return contiguous_clusters(num_clients, groups) * period // groups


# -------------------------------------------------------------------- connected
def connected_sample(
    connected: Sequence[int],
    m: int | None,
    seed: int,
    server_round: int,
    stream_name: str = "connected-sample",
) -> list[int]:
    """Round ``server_round``'s relayed ids: all ``connected`` ones, or ``m`` of them
    drawn uniformly without replacement by a generator seeded by (seed, round) on the
    ``stream_name`` stream (the cyclic oracle's subsample uses ``cyclic-sample``)."""
    ids = sorted(int(i) for i in connected)
    if m is None or len(ids) <= m:
        return ids
    rng = stream(stream_name, seed, server_round)
    return sorted(int(i) for i in rng.choice(ids, size=m, replace=False))
