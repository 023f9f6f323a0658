"""Two-state Markov availability laws, pure: the chains' states are a function of (seed, r).

Numpy only, no Flower, like :mod:`fedram_flwr.availability.laws`. Each client (or each
cluster of clients) follows a chain with stationary availability pi and lag-1
autocorrelation lambda (CA-Fed Sec. III-D, V-A); with lambda = 0 the chains are FedAR's
independent Bernoulli clients (Sec. 6.1):

- the chains: :func:`markov_lambda_min`, :func:`check_markov_law`,
  :func:`markov_activation`, :func:`markov_step`, :class:`MarkovChains`;
- the papers' generators of (pi, lambda): :func:`fedar_spread`, :func:`ca_fed_markov_law`,
  :func:`ca_fed_cluster_law`, :func:`contiguous_clusters`, :func:`label_permutation`.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from fedram_flwr.rng import stream


def markov_lambda_min(pi: np.ndarray) -> np.ndarray:
    """Compute the smallest valid lambda of each two-state chain.

    The smallest lambda for which P(1->1) = lambda + (1 - lambda) pi and
    P(0->1) = (1 - lambda) pi are probabilities: -min(pi, 1 - pi) / max(pi, 1 - pi).

    Parameters
    ----------
    pi : np.ndarray
        Stationary availabilities, probabilities in [0, 1].

    Returns
    -------
    np.ndarray
        lambda_min, same shape, in [-1, 0].
    """
    pi = np.asarray(pi, dtype=float)
    return -np.minimum(pi, 1 - pi) / np.maximum(pi, 1 - pi)


def check_markov_law(
    pi: np.ndarray,
    lam: np.ndarray,
    *,
    pi_field: str = "availability.params.pi",
    lam_field: str = "availability.params.lam",
) -> None:
    """Check that every chain (pi_k, lambda_k) is a valid two-state Markov chain.

    Valid: pi in [0, 1] and lambda in [lambda_min(pi), 1) (lambda = 1 never switches).

    Parameters
    ----------
    pi, lam : np.ndarray
        Each chain's stationary availability and lag-1 autocorrelation, shape (K,).
    pi_field, lam_field : str
        The names the errors give them (scenario field paths).

    Raises
    ------
    ValueError
        Naming the field and entry, unless every chain is valid.
    """
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
    """Spread Bernoulli p_k "varying from p_min to 1" (FedAR Sec. 6.1).

    The paper gives no more detail: evenly spaced from 1 (client 0) down to p_min (the
    last client).

    Parameters
    ----------
    num_clients : int
        K, >= 1.
    p_min : float
        The last client's probability, in [0, 1].

    Returns
    -------
    np.ndarray
        p, shape (K,), descending from 1 to ``p_min``.
    """
    return np.linspace(1.0, p_min, num_clients)


def markov_activation(pi: np.ndarray, lam: np.ndarray, state: np.ndarray | None) -> np.ndarray:
    """Compute each chain's probability of being active in the next round.

    P(active next round | state) = lambda * state + (1 - lambda) pi, i.e.
    P(1->1) = lambda + (1 - lambda) pi and P(0->1) = (1 - lambda) pi (CA-Fed Sec. V-A,
    second eigenvalue lambda).

    Parameters
    ----------
    pi, lam : np.ndarray
        Stationary availability (in [0, 1]) and lag-1 autocorrelation of each chain.
    state : np.ndarray or None
        Active flags (bool or 0/1) of the chains in the current round; None before the
        first round.

    Returns
    -------
    np.ndarray
        Probabilities in [0, 1]; the stationary pi when there is no previous state.
    """
    return pi if state is None else lam * state + (1 - lam) * pi


def markov_step(
    pi: np.ndarray, lam: np.ndarray, state: np.ndarray | None, seed: int, server_round: int
) -> np.ndarray:
    """Step the chains to ``server_round`` from the states of the round before.

    Chain j is active when its uniform from the ``markov-step`` stream seeded by
    (seed, round) falls below :func:`markov_activation`.

    Parameters
    ----------
    pi, lam : np.ndarray
        Stationary availability (in [0, 1]) and lag-1 autocorrelation of each chain.
    state : np.ndarray or None
        The chains' active flags in ``server_round - 1``; None before round 1.
    seed, server_round : int
        The scenario seed and the server round (>= 1) that seed the uniforms.

    Returns
    -------
    np.ndarray
        The chains' active flags (bool) in ``server_round``.
    """
    u = stream("markov-step", seed, server_round).random(pi.size)
    return u < markov_activation(pi, lam, state)


class MarkovChains:
    """Independent two-state chains (pi_j, lambda_j), replayable by round.

    Their states in round r are a pure function of (seed, r). Rounds are stepped in
    order once (:func:`markov_step`) and cached as packed bits: O(chains) per new round,
    any access order.

    Parameters
    ----------
    pi, lam : np.ndarray
        Each chain's stationary availability and lag-1 autocorrelation, shape (J,);
        valid chains (:func:`check_markov_law`).
    seed : int
        The scenario seed.
    """

    def __init__(self, pi: np.ndarray, lam: np.ndarray, seed: int) -> None:
        self.pi, self.lam, self.seed = pi, lam, seed
        self._bits: list[np.ndarray] = []  # packed chain states of rounds 1, 2, ...
        self._state: np.ndarray | None = None  # chain states of the last stepped round

    def states(self, server_round: int) -> np.ndarray:
        """Return the active flags of the chains in ``server_round``.

        Parameters
        ----------
        server_round : int
            Server round, >= 1.

        Returns
        -------
        np.ndarray
            Shape (J,), bool.

        Raises
        ------
        ValueError
            If ``server_round`` < 1.
        """
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
    """Generate (pi, lambda) of the CA-Fed paper's clients (Sec. V-A a).

    The first half "more available" (pi = 1/2 + g), the second half "less available"
    (pi = 1/2 - g); each half splits into "correlated" clients (lambda = nu, first) and
    "weakly correlated" ones (lambda ~ N(0, eps^2), clipped to [lambda_min(pi), 1)).

    Parameters
    ----------
    num_clients : int
        K, >= 1.
    g : float
        Availability gap, in [0, 1/2].
    nu : float
        The correlated clients' lambda, < 1.
    eps : float
        Standard deviation of the weakly correlated clients' lambda, >= 0.
    rng : np.random.Generator
        Source of the normal draws.

    Returns
    -------
    pi, lam : np.ndarray
        Shape (K,) each.
    """
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
    """Generate (pi_c, lambda_c) of CA-Fed's spatial-correlation experiment (Sec. V-B e).

    The first half of the clusters "more available" (pi = 1/2 + g, lambda = 0), the
    others "less available, correlated" (pi = 1/2 - g, lambda_c = c / C); with C = 10,
    g = 0.4: pi = 0.9 for c = 0..4, pi = 0.1 and lambda = 0.5..0.9 for c = 5..9.

    Parameters
    ----------
    num_clusters : int
        C, >= 1.
    g : float
        Availability gap, in [0, 1/2].

    Returns
    -------
    pi, lam : np.ndarray
        Shape (C,) each.
    """
    c = np.arange(num_clusters)
    more = c < (num_clusters + 1) // 2
    return np.where(more, 0.5 + g, 0.5 - g), np.where(more, 0.0, c / num_clusters)


def contiguous_clusters(num_clients: int, num_clusters: int) -> np.ndarray:
    """Assign clients to clusters in equal contiguous blocks of ids (k -> k C // N).

    Parameters
    ----------
    num_clients, num_clusters : int
        N and C, both >= 1.

    Returns
    -------
    np.ndarray
        Shape (N,): each client's cluster, in 0..C-1.
    """
    return np.arange(num_clients) * num_clusters // num_clients


def label_permutation(pi: np.ndarray, client_classes: Sequence[Sequence[int]]) -> np.ndarray:
    """Permute generated availability parameters so that they follow the labels.

    Label-correlated availability: clients in ascending order of the mean id of the
    classes they hold receive the generated parameters in descending order of pi (ties
    keep id order): clients holding lower class ids are more available. Only who gets
    which (pi, lambda) changes, not their values.

    Parameters
    ----------
    pi : np.ndarray
        The generated availabilities, shape (K,).
    client_classes : sequence of sequence of int
        The class ids each client holds, one non-empty sequence per client.

    Returns
    -------
    np.ndarray
        ``perm``, shape (K,): client k takes the generated parameters of ``perm[k]``.
    """
    mean_class = np.array([np.mean(c) for c in client_classes])
    perm = np.empty(len(pi), dtype=int)
    perm[np.argsort(mean_class, kind="stable")] = np.argsort(-np.asarray(pi), kind="stable")
    return perm
