"""Non-stationary independent Bernoulli availability (FedAWE).

FedAWE: Xiang et al., NeurIPS 2024, Sec. 7 and Appendix J.3. Client i is active in
round t with probability p_i^t = p_i f_i(t), independently of the others and of the
past.

The paper's rounds are t = 0, ..., T - 1 (Algorithm 1, line 3); ours start at 1, so
server round r is the paper's t = r - 1. The dynamics f_i(t) (App. J.3):

- ``stationary``: f = 1;
- ``staircase``: f = 1 in the first half of every period of P rounds, ``low`` (the
  paper's 0.4) in the second: t mod P < P / 2;
- ``sine``: f = gamma sin(2 pi t / P) + 1 - gamma;
- ``interleaved-sine``: f_i = g(t) 1{p_i g(t) >= delta_0}, g the sine above: cut to 0
  while p_i g(t) < delta_0, so the cut-offs differ between clients.

The base p_i = <nu_i, phi> (App. J.3): nu_i the class distribution of client i's
training labels, [phi]_c ~ U(0, Phi_c) (the paper: Phi_c = 1 for the first five classes,
0.5 for the other five): :func:`fedawe_phi`, :func:`fedawe_base_p`.

Draws: client i is active in round r when its uniform from the ``nonstationary-step``
stream seeded by (seed, r) falls below p_i^r: a pure function of (seed, r).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np

from fedram_flwr.availability.laws import HiddenLaw
from fedram_flwr.availability.manager import OracleClientManager
from fedram_flwr.rng import stream

Dynamics = Literal["stationary", "staircase", "sine", "interleaved-sine"]
DYNAMICS: tuple[Dynamics, ...] = ("stationary", "staircase", "sine", "interleaved-sine")


def fedawe_f(
    dynamics: Dynamics,
    t: int,
    p: np.ndarray,
    *,
    period: int = 20,
    gamma: float = 0.3,
    delta0: float = 0.1,
    low: float = 0.4,
) -> np.ndarray:
    """Compute the dynamics f_i(t) of every client (FedAWE App. J.3).

    The defaults are the paper's P = 20, gamma = 0.3, delta_0 = 0.1 and the
    staircase's 0.4 (see the module docstring for each dynamics' formula).

    Parameters
    ----------
    dynamics : {"stationary", "staircase", "sine", "interleaved-sine"}
        Which f.
    t : int
        The paper's round, >= 0 (server round r is t = r - 1).
    p : np.ndarray
        The base probabilities p_i in [0, 1] (only the interleaved sine's cut-off reads
        them; they give the shape).
    period : int
        P, in rounds, >= 1.
    gamma : float
        The sine's amplitude, in [0, 1/2] (f stays in [0, 1]).
    delta0 : float
        The interleaved sine's cut-off delta_0, a probability in [0, 1].
    low : float
        The staircase's second-half value, in [0, 1].

    Returns
    -------
    np.ndarray
        f_i(t), shape of ``p``, in [0, 1].

    Raises
    ------
    ValueError
        If ``dynamics`` is not one of :data:`DYNAMICS`.
    """
    p = np.asarray(p, dtype=float)
    if dynamics == "stationary":
        return np.ones_like(p)
    if dynamics == "staircase":
        return np.full_like(p, 1.0 if t % period < period / 2 else low)
    g = gamma * np.sin(2 * np.pi * t / period) + 1 - gamma
    if dynamics == "sine":
        return np.full_like(p, g)
    if dynamics == "interleaved-sine":
        return np.where(p * g >= delta0, g, 0.0)
    raise ValueError(
        f"availability.params.dynamics: {dynamics!r} is not allowed; allowed values: "
        f"{', '.join(DYNAMICS)}"
    )


def fedawe_phi(phi_max: Sequence[float], rng: np.random.Generator) -> np.ndarray:
    """Draw each class's contribution [phi]_c ~ U(0, Phi_c) (FedAWE App. J.3).

    Parameters
    ----------
    phi_max : sequence of float
        Phi_c per class, >= 0 (:func:`default_phi_max`).
    rng : np.random.Generator
        Source of the uniforms.

    Returns
    -------
    np.ndarray
        phi, one entry per class.
    """
    return rng.uniform(0.0, np.asarray(phi_max, dtype=float))


def default_phi_max(num_classes: int) -> np.ndarray:
    """Return the paper's Phi_c (FedAWE App. J.3).

    1 for the first half of the classes (the first five of ten), 0.5 for the others.

    Parameters
    ----------
    num_classes : int
        C, >= 1.

    Returns
    -------
    np.ndarray
        Phi, shape (C,).
    """
    return np.where(np.arange(num_classes) < (num_classes + 1) // 2, 1.0, 0.5)


def fedawe_base_p(label_counts: np.ndarray, phi: np.ndarray) -> np.ndarray:
    """Compute the base probabilities p_i = <nu_i, phi> (FedAWE App. J.3).

    Parameters
    ----------
    label_counts : np.ndarray
        Clients x classes: each client's number of training samples per class; nu_i is
        row i normalised to sum to 1.
    phi : np.ndarray
        Each class's contribution (:func:`fedawe_phi`), one per class.

    Returns
    -------
    np.ndarray
        p, one per client, in [0, max phi].

    Raises
    ------
    ValueError
        If a client holds no samples (its nu_i is undefined).
    """
    counts = np.asarray(label_counts, dtype=float)
    totals = counts.sum(axis=1)
    empty = np.flatnonzero(totals <= 0)
    if empty.size:
        raise ValueError(
            f"availability.params.p: client {empty[0]} holds no samples, so its class "
            "distribution nu_i is undefined; give p (one per client)"
        )
    return (counts / totals[:, None]) @ np.asarray(phi, dtype=float)


@dataclass(frozen=True, eq=False)  # an array field: compare the fields, not the values
class NonStationaryLaw:
    """The law p_i^t = p_i f_i(t) of every client, a pure function of the server round.

    Server round r is the paper's t = r - 1 (App. J.3): what the oracle draws with, and
    what an oracle-informed algorithm reads (FedAvg with known p_i^t, FedAWE Table 2).
    Numpy only, picklable.

    Parameters
    ----------
    p : np.ndarray
        Base probabilities p_i, in [0, 1].
    dynamics : {"stationary", "staircase", "sine", "interleaved-sine"}
        Which f (:func:`fedawe_f`).
    period, gamma, delta0, low
        The dynamics' shape, as for :func:`fedawe_f`.
    """

    p: np.ndarray
    dynamics: Dynamics
    period: int = 20
    gamma: float = 0.3
    delta0: float = 0.1
    low: float = 0.4

    def __call__(self, server_round: int) -> np.ndarray:
        """Return p_i^t of every client in ``server_round`` (t = server_round - 1).

        Parameters
        ----------
        server_round : int
            Server round, >= 1.

        Returns
        -------
        np.ndarray
            Probabilities in [0, 1], one per client.

        Raises
        ------
        ValueError
            If ``server_round`` < 1.
        """
        if server_round < 1:
            raise ValueError(f"rounds start at 1, got {server_round}")
        shape = {"period": self.period, "gamma": self.gamma, "delta0": self.delta0}
        return self.p * fedawe_f(self.dynamics, server_round - 1, self.p, low=self.low, **shape)


class NonStationaryClientManager(OracleClientManager):
    """Independent Bernoulli availability p_i^t = p_i f_i(t) (FedAWE Sec. 7, App. J.3).

    Server round r is the paper's t = r - 1. :meth:`probabilities` is the per-round law
    (its :attr:`law`, for oracle-informed algorithms: FedAvg with known p_i^t),
    ``hidden_law().pi`` its long-run mean p_i x (mean of f_i over one period). Client i
    is active in round r when its uniform from the ``nonstationary-step`` stream seeded
    by (seed, r) falls below p_i^r.

    Parameters
    ----------
    p : sequence of float
        Base probabilities p_i, in [0, 1], one per client.
    dynamics : {"stationary", "staircase", "sine", "interleaved-sine"}
        Which f (:func:`fedawe_f`).
    seed : int
        The scenario seed the draws come from.
    period, gamma, delta0, low
        The dynamics' shape, as for :func:`fedawe_f`.
    wait_timeout : float
        Seconds, >= 0: the longest a wait for clients to connect lasts.

    Raises
    ------
    ValueError
        Naming the field, if a p_i is outside [0, 1] or ``dynamics`` is unknown.
    """

    def __init__(
        self,
        p: Sequence[float],
        dynamics: Dynamics,
        seed: int,
        *,
        period: int = 20,
        gamma: float = 0.3,
        delta0: float = 0.1,
        low: float = 0.4,
        wait_timeout: float = 120.0,
    ) -> None:
        p = np.asarray(p, dtype=float)
        bad = np.flatnonzero(~((p >= 0) & (p <= 1)))  # NaN too
        if p.ndim != 1 or bad.size:
            k = bad[0] if bad.size else 0
            raise ValueError(f"availability.params.p[{k}]: must be in [0, 1], got {p.ravel()[k]}")
        fedawe_f(dynamics, 0, p)  # an unknown dynamics raises here, naming the field
        super().__init__(p.size, seed, wait_timeout=wait_timeout)
        self.dynamics, self._p = dynamics, p
        self._period = period
        self._shape = {"period": period, "gamma": gamma, "delta0": delta0, "low": low}
        self.law = NonStationaryLaw(p, dynamics, **self._shape)

    @property
    def base_p(self) -> np.ndarray:
        """Each client's base probability p_i."""
        return self._p.copy()

    def probabilities(self, server_round: int) -> np.ndarray:
        """Return p_i^t = p_i f_i(t) of every client in ``server_round`` (t = server_round - 1)."""
        return self.law(server_round)

    def hidden_law(self) -> HiddenLaw:
        """Return each client's long-run availability as ``pi`` (no lambda).

        That is p_i^t averaged over one period (rounds 1..P; f_i is P-periodic), which
        the realised frequencies approach.
        """
        f = [fedawe_f(self.dynamics, t, self._p, **self._shape) for t in range(self._period)]
        return HiddenLaw(self._p * np.mean(f, axis=0))  # exactly p when stationary

    def draw(self, server_round: int) -> list[int]:
        """Return the clients whose uniform falls below p_i^t in ``server_round`` (>= 1)."""
        u = stream("nonstationary-step", self.seed, server_round).random(self.num_clients)
        return np.flatnonzero(u < self.probabilities(server_round)).tolist()
