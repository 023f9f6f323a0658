"""Minimum-separation participation: an R-order Markov chain of participant sets.

Sun, Zhang, Xu, Joshi, Sharma, Wei, "Debiasing Federated Learning with Correlated
Client Participation", ICLR 2025, arXiv:2410.01209, Sec. 3: a client that participated
in one of the last R rounds may not participate again, so who participates is an
R-order Markov chain whose state is the last R participant sets.

The rule within a round is not public in a form we could read (only the paper's
abstract and reviews): here ``m`` distinct clients are drawn among the eligible ones
by successive sampling proportional to each client's intrinsic weight q_i (the law
without separation, R = 0, is then the RAM's draw by q). Every draw comes from the
``min-separation-draw`` stream seeded by (seed, round); the chain is stepped once, in
order, and cached, so round r's set is a pure function of (seed, r).

pi_R^i, the stationary probability that client i participates in a round (sum_i pi_R^i
= m), is computed exactly on the chain's states (:func:`stationary_participation`) when
they are few, and as the chain's own long-run frequency otherwise. With R = N/m - 1
every client participates exactly once every N/m rounds (the paper's cyclic case) and
pi_R^i = m/N; a larger R makes pi_R more uniform (the paper's Sec. 4).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence

import numpy as np

from fedram_flwr.availability.laws import HiddenLaw
from fedram_flwr.availability.manager import OracleClientManager
from fedram_flwr.rng import stream

MAX_EXACT_STATES = 20_000  # beyond this many chain states, pi_R is the chain's frequency
FREQUENCY_ROUNDS = 20_000  # rounds of the chain that estimate pi_R then


def check_separation_law(q: np.ndarray, m: int, separation: int) -> None:
    """Raise ValueError unless every q_i > 0 and enough clients stay eligible.

    Enough: (R + 1) m <= N. The error names the scenario field.

    Parameters
    ----------
    q : np.ndarray
        Each client's weight, > 0.
    m : int
        Participants a round, >= 1.
    separation : int
        R, rounds, >= 0.
    """
    if q.ndim != 1 or not np.all(q > 0):  # NaN too
        raise ValueError(f"availability.params.q: weights must be > 0, got {q.tolist()}")
    if m < 1 or separation < 0 or (separation + 1) * m > q.size:
        raise ValueError(
            f"availability.params.separation: (separation + 1) x clients_per_round must be "
            f"<= the {q.size} clients, got separation = {separation}, clients_per_round = {m}"
        )


def successive_sample(q: np.ndarray, eligible: np.ndarray, u: np.ndarray) -> list[int]:
    """Draw len(u) distinct ids of ``eligible`` one after the other.

    Each is drawn proportionally to q among those not yet drawn.

    Parameters
    ----------
    q : np.ndarray
        Each client's weight, > 0.
    eligible : np.ndarray
        The ids that may be drawn.
    u : np.ndarray
        One uniform in [0, 1) per draw.

    Returns
    -------
    list of int
        The drawn ids, in drawing order.
    """
    ids = [int(i) for i in eligible]
    drawn: list[int] = []
    for x in u:
        w = q[ids]
        k = int(np.searchsorted(np.cumsum(w), x * w.sum(), side="right"))
        drawn.append(ids.pop(min(k, len(ids) - 1)))
    return sorted(drawn)


def separation_draw(
    q: np.ndarray, m: int, recent: Sequence[Sequence[int]], seed: int, server_round: int
) -> list[int]:
    """Return round ``server_round``'s participants.

    m clients not in any of the ``recent`` sets (the last R rounds'), by
    :func:`successive_sample` on the round's uniforms (seeded by (seed, round)).

    Parameters
    ----------
    q : np.ndarray
        Each client's weight, > 0.
    m : int
        Participants a round.
    recent : sequence of sequences of int
        The last R rounds' participant sets.
    seed, server_round : int
        The scenario seed and the round (>= 1).

    Returns
    -------
    list of int
        The participants, in drawing order.
    """
    barred = np.zeros(q.size, dtype=bool)
    for ids in recent:
        barred[list(ids)] = True
    u = stream("min-separation-draw", seed, server_round).random(m)
    return successive_sample(q, np.flatnonzero(~barred), u)


class SeparationChain:
    """The participants of each round, a pure function of (seed, round).

    Rounds are drawn in order once (:func:`separation_draw`) and cached.

    Parameters
    ----------
    q : np.ndarray
        Each client's weight, > 0.
    m : int
        Participants a round.
    separation : int
        R, rounds, >= 0.
    seed : int
        The scenario seed.
    """

    def __init__(self, q: np.ndarray, m: int, separation: int, seed: int) -> None:
        check_separation_law(q, m, separation)
        self.q, self.m, self.separation, self.seed = q, m, separation, seed
        self._sets: list[list[int]] = []  # participants of rounds 1, 2, ...

    def participants(self, server_round: int) -> list[int]:
        """Return the ids drawn in ``server_round`` (>= 1)."""
        if server_round < 1:
            raise ValueError(f"rounds start at 1, got {server_round}")
        while len(self._sets) < server_round:
            r = len(self._sets) + 1
            recent = self._sets[max(0, r - 1 - self.separation) :] if self.separation else []
            self._sets.append(separation_draw(self.q, self.m, recent, self.seed, r))
        return self._sets[server_round - 1]

    def frequencies(self, rounds: int) -> np.ndarray:
        """Each client's fraction of rounds 1..``rounds`` in which it participated."""
        counts = np.zeros(self.q.size)
        for r in range(1, rounds + 1):
            counts[self.participants(r)] += 1
        return counts / rounds


def set_probability(q: np.ndarray, eligible: Sequence[int], chosen: Sequence[int]) -> float:
    """Return P(successive sampling by q from ``eligible`` draws exactly ``chosen``).

    The sum over the orders of the set of prod_k q_(k) / (q(eligible) - q(drawn before)).

    Parameters
    ----------
    q : np.ndarray
        Each client's weight, > 0.
    eligible, chosen : sequence of int
        The ids that may be drawn, and the set drawn (a subset of them).

    Returns
    -------
    float
        The probability, in [0, 1].
    """
    total = float(q[list(eligible)].sum())
    p = 0.0
    for order in itertools.permutations(chosen):
        left, prob = total, 1.0
        for i in order:
            prob *= q[i] / left
            left -= q[i]
        p += prob
    return p


def stationary_participation(q: np.ndarray, m: int, separation: int) -> np.ndarray | None:
    """Return pi_R^i of the chain (summing to m), exactly.

    Its states are the sequences of the last R participant sets, reached from the empty
    history; the stationary law solves pi P = pi on them (transient states get 0).

    Parameters
    ----------
    q : np.ndarray
        Each client's weight, > 0.
    m : int
        Participants a round.
    separation : int
        R, rounds, >= 0.

    Returns
    -------
    np.ndarray or None
        Each client's stationary participation probability; ``None`` when there would
        be more than :data:`MAX_EXACT_STATES` states.
    """
    n = q.size
    if math.comb(n, m) > MAX_EXACT_STATES:
        return None
    subsets = [tuple(s) for s in itertools.combinations(range(n), m)]
    if separation == 0:  # independent rounds: one draw by q from everyone
        return sum(set_probability(q, range(n), s) * np.isin(np.arange(n), s) for s in subsets)
    start: tuple[tuple[int, ...], ...] = ()
    index: dict[tuple[tuple[int, ...], ...], int] = {start: 0}
    edges: list[tuple[int, int, float]] = []
    frontier = [start]
    while frontier:
        state = frontier.pop()
        barred = {i for s in state for i in s}
        eligible = [i for i in range(n) if i not in barred]
        for s in subsets:
            if barred.isdisjoint(s):
                nxt = (*state, s)[-separation:]
                if nxt not in index:
                    if len(index) >= MAX_EXACT_STATES:
                        return None
                    index[nxt] = len(index)
                    frontier.append(nxt)
                edges.append((index[state], index[nxt], set_probability(q, eligible, s)))
    size = len(index)
    p = np.zeros((size, size))
    for src, dst, prob in edges:
        p[src, dst] += prob
    a = np.vstack([p.T - np.eye(size), np.ones(size)])
    b = np.zeros(size + 1)
    b[-1] = 1.0
    dist = np.linalg.lstsq(a, b, rcond=None)[0]
    pi = np.zeros(n)
    for state, k in index.items():  # a state's last set: the participants of its round
        if state:
            pi[list(state[-1])] += dist[k]
    return np.asarray(pi, dtype=float)


class MinSeparationClientManager(OracleClientManager):
    """Minimum-separation participation (Sun et al., ICLR 2025, Sec. 3).

    Each round ``m`` clients among those that did not participate in the last
    ``separation`` (R) rounds, drawn by successive sampling proportional to their weights
    q (:class:`SeparationChain`). Its hidden law is pi_R
    (:func:`stationary_participation`, or the chain's frequency over
    :data:`FREQUENCY_ROUNDS` rounds when the states are too many).
    """

    def __init__(
        self,
        q: Sequence[float],
        seed: int,
        *,
        clients_per_round: int = 1,
        separation: int = 1,
        wait_timeout: float = 120.0,
    ) -> None:
        q = np.asarray(q, dtype=float)
        check_separation_law(q, clients_per_round, separation)
        super().__init__(q.size, seed, wait_timeout=wait_timeout)
        self._chain = SeparationChain(q, clients_per_round, separation, seed)
        self._pi: np.ndarray | None = None

    def hidden_law(self) -> HiddenLaw:
        """pi_R^i, each client's stationary probability of participating in a round."""
        if self._pi is None:
            c = self._chain
            pi = stationary_participation(c.q, c.m, c.separation)
            self._pi = c.frequencies(FREQUENCY_ROUNDS) if pi is None else pi
        return HiddenLaw(self._pi.copy())

    def draw(self, server_round: int) -> list[int]:
        """Return the participants of ``server_round`` (>= 1)."""
        return list(self._chain.participants(server_round))
