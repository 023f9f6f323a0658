"""Availability on the simulated clock: who is available at time t (seconds).

Numpy only. Every law here answers :meth:`AvailableAt.available_at`, a pure function
of (seed, t), so asking twice at one time gives one answer:

- :class:`TraceAvailability`: FedScale client behaviour traces
  (:mod:`fedram_flwr.availability.fedscale`) replayed in seconds;
- :class:`DiurnalLaw`: availability that varies over the day;
- :class:`RoundTicks`: any round-indexed oracle (``draw(round)``: the ``ram``,
  ``bernoulli``, ``markov``, ``clustered``, ``cyclic``, ``trace``, ``nonstationary``
  oracles) on the clock, one round per tick; unchanged, so a run without a time model
  (one tick per round) asks exactly what it asked before.

FedScale's replay (``fedscale/cloud/internal/client_metadata.py``,
``ClientMetadata.is_active``) keeps a ``behavior_index`` per client that moves at most
one interval forward per query, wrapping to 0 after the last; a query at ``cur_time``
is answered True when ``active[i] <= cur_time mod finish_time <= inactive[i]`` for that
one index i. The project's interval test (:meth:`Behaviour.available_at`) asks every
interval instead. They agree when queries come in increasing time, at most one interval
apart and never past ``finish_time``; otherwise FedScale's answer depends on the past
queries (:func:`fedscale_is_active` replays it exactly):

- a query that skips an interval is compared with the skipped one: False, even inside
  a later interval (the index only caught up by one);
- past ``finish_time`` the index stays on the last interval until a query falls
  between the last interval's end and ``finish_time``; until then the repeated pattern
  is not seen (intervals before the last answer False);
- every query moves the index: FedScale asks at the round's start
  (``getFeasibleClients``) and again at each client's completion time
  (``tictak_client_tasks``), so one client's answers depend on the others' durations.

The interval test repeats the pattern exactly every ``finish_time`` and never depends
on what was asked before; it is what the ``trace`` oracle has always used.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import numpy as np

from fedram_flwr.availability.fedscale import Behaviour, read_fedscale
from fedram_flwr.clock.simclock import TICK_SECONDS
from fedram_flwr.rng import stream
from fedram_flwr.scenario.config import ClockAvailabilityConfig

DAY_SECONDS = 86400.0
"""The diurnal law's default period."""

_EPS = 1e-9
"""Slack of a slot's index: t sums durations, so a slot's start may read 1 ulp early."""


def slot_of(t: float, slot_seconds: float) -> int:
    """Return the index of the slot of ``slot_seconds`` that time ``t`` falls in.

    Parameters
    ----------
    t : float
        Seconds, >= 0.
    slot_seconds : float
        > 0.

    Returns
    -------
    int
        floor(t / slot_seconds), with a relative slack of 1e-9 so that a clock summed
        from float durations lands in the slot it reached.

    Raises
    ------
    ValueError
        If ``t`` is negative or not finite.
    """
    if not (math.isfinite(t) and t >= 0):
        raise ValueError(f"t: {t!r} is not a time >= 0 (seconds)")
    return int(math.floor(t / slot_seconds + _EPS))


@runtime_checkable
class AvailableAt(Protocol):
    """Who is available at a simulated time: what a round driver asks."""

    num_clients: int

    def available_at(self, t: float) -> list[int]:
        """Return the ids available at ``t`` seconds (>= 0), ascending."""
        ...


class RoundIndexed(Protocol):
    """A round-indexed oracle: every availability oracle's ``draw``."""

    num_clients: int

    def draw(self, server_round: int) -> list[int]:
        """Return the ids available in ``server_round`` (>= 1), ascending."""
        ...


# --------------------------------------------------------------------- round ticks
@dataclass(frozen=True)
class RoundTicks:
    """A round-indexed oracle on the clock: one round per tick.

    At time t the oracle is asked for round floor(t / tick_seconds) + 1
    (:func:`slot_of`): without a time model the clock reads r - 1 ticks in round r, so
    round r asks ``draw(r)`` exactly as before.

    Parameters
    ----------
    oracle : RoundIndexed
        Any object with ``num_clients`` and ``draw(round)``, unchanged.
    tick_seconds : float
        Seconds one round of the oracle lasts, > 0.
    """

    oracle: RoundIndexed
    tick_seconds: float = TICK_SECONDS

    def __post_init__(self) -> None:
        if not (math.isfinite(self.tick_seconds) and self.tick_seconds > 0):
            raise ValueError(f"tick_seconds: {self.tick_seconds!r} is not a duration > 0")

    @property
    def num_clients(self) -> int:
        """K, the oracle's number of clients."""
        return self.oracle.num_clients

    def round_at(self, t: float) -> int:
        """Return the oracle's round at ``t`` seconds: floor(t / tick) + 1."""
        return slot_of(t, self.tick_seconds) + 1

    def available_at(self, t: float) -> list[int]:
        """Return ``oracle.draw(round_at(t))``."""
        return self.oracle.draw(self.round_at(t))


def available_at_of(oracle: RoundIndexed | None, available_at: Any) -> Any:
    """Return ``RoundTicks(oracle).available_at``, else ``available_at`` (not both).

    Raises
    ------
    ValueError
        If both are given.
    """
    if oracle is None:
        return available_at
    if available_at is not None:
        raise ValueError(
            "oracle and available_at both given: give one (oracle=... is "
            "available_at=RoundTicks(oracle).available_at)"
        )
    return RoundTicks(oracle).available_at


# ------------------------------------------------------------- FedScale in seconds
@dataclass(frozen=True)
class TraceAvailability:
    """FedScale behaviour traces replayed in seconds, by the interval test.

    Client k is available at t when start_time + t, taken mod its ``finish_time``, lies
    in one of its intervals, ends included (:meth:`Behaviour.available_at`; the module
    docstring says how FedScale's moving index differs).

    Parameters
    ----------
    behaviours : sequence of Behaviour
        One per client (:func:`~fedram_flwr.availability.fedscale.read_fedscale`).
    start_time : float
        Seconds into the trace at which the run starts, >= 0.
    """

    behaviours: Sequence[Behaviour]
    start_time: float = 0.0

    @property
    def num_clients(self) -> int:
        """K, one per behaviour."""
        return len(self.behaviours)

    def available_at(self, t: float) -> list[int]:
        """Return the clients inside an interval at ``start_time + t`` seconds."""
        at = np.array([self.start_time + t])
        return [k for k, b in enumerate(self.behaviours) if b.available_at(at)[0]]


def fedscale_is_active(
    behaviour: Behaviour, times: Sequence[float], index: int = 0
) -> tuple[np.ndarray, int]:
    """Replay FedScale's ``ClientMetadata.is_active`` over a sequence of queries.

    For each query time, in order (FedScale's code, transcribed)::

        norm = t mod finish_time
        if norm > inactive[index]: index += 1
        index %= len(active)
        answer = active[index] <= norm <= inactive[index]

    Parameters
    ----------
    behaviour : Behaviour
        The client's trace.
    times : sequence of float
        The query times, seconds, in the order they are asked.
    index : int
        ``behavior_index`` before the first query (FedScale starts at 0).

    Returns
    -------
    flags : np.ndarray
        Bool, one answer per query.
    index : int
        ``behavior_index`` after the last query.

    Notes
    -----
    A client with no interval is never active here; FedScale's ``index %= 0`` raises
    ``ZeroDivisionError`` for it.
    """
    n = behaviour.active.size
    flags = np.zeros(len(times), dtype=bool)
    if n == 0:
        return flags, index
    for q, t in enumerate(times):
        norm = t % behaviour.finish_time
        if norm > behaviour.inactive[index]:
            index += 1
        index %= n
        flags[q] = behaviour.active[index] <= norm <= behaviour.inactive[index]
    return flags, index


# ------------------------------------------------------------------------ diurnal
@dataclass(frozen=True, eq=False)  # arrays: compare the fields, not the values
class DiurnalLaw:
    """Availability that varies over the day, drawn once per time slot.

    p_i(t) = clip(base_i (1 + amplitude cos(2 pi (t - peak_i) / period)), 0, 1): one
    harmonic of a daily cycle, highest at peak_i (a client's time zone and habits), with
    daily mean base_i when nothing is clipped (the cosine averages to 0). Device traces
    show such a cycle: phones train when idle, charging and on Wi-Fi, mostly at night
    (Yang et al., "Characterizing Impacts of Heterogeneity in Federated Learning upon
    Large-Scale Smartphone Data", WWW 2021: the 136k-device trace FedScale's behaviour
    trace comes from; Eichner et al., "Semi-Cyclic Stochastic Gradient Descent", ICML
    2019, on the day's cycle of the available population).

    In slot s (seconds [s x slot, (s + 1) x slot)) client i is available when its
    uniform from the ``diurnal-slot`` stream seeded by (seed, s) is below p_i(s x slot):
    constant within a slot, independent across slots and clients.

    Parameters
    ----------
    base : np.ndarray
        base_i in [0, 1], shape (K,).
    amplitude : float
        a in [0, 1].
    peak_seconds : np.ndarray
        peak_i, seconds, shape (K,).
    seed : int
        The scenario seed.
    period_seconds : float
        The cycle's length, > 0 (a day).
    slot_seconds : float
        How long one draw lasts, > 0.
    """

    base: np.ndarray
    amplitude: float
    peak_seconds: np.ndarray
    seed: int
    period_seconds: float = DAY_SECONDS
    slot_seconds: float = 60.0

    def __post_init__(self) -> None:
        base = np.asarray(self.base, dtype=float)
        if base.ndim != 1 or not np.all((base >= 0) & (base <= 1)):
            raise ValueError("base: give one probability in [0, 1] per client")
        peak = np.asarray(self.peak_seconds, dtype=float)
        if peak.size not in (1, base.size) or peak.ndim > 1 or not np.all(np.isfinite(peak)):
            raise ValueError(
                f"peak_seconds: give one finite time or one per client ({base.size}), "
                f"got {peak.size} values"
            )
        peak = np.broadcast_to(peak.reshape(-1), base.shape)
        if not 0 <= self.amplitude <= 1:
            raise ValueError(f"amplitude: {self.amplitude!r} is outside [0, 1]")
        for name in ("period_seconds", "slot_seconds"):
            value = getattr(self, name)
            if not (math.isfinite(value) and value > 0):
                raise ValueError(f"{name}: {value!r} is not a duration > 0")
        object.__setattr__(self, "base", base)
        object.__setattr__(self, "peak_seconds", peak.copy())

    @property
    def num_clients(self) -> int:
        """K, one per base probability."""
        return int(self.base.size)

    def probabilities(self, t: float | np.ndarray) -> np.ndarray:
        """Return p_i(t) for every client.

        Parameters
        ----------
        t : float or np.ndarray
            Seconds; an array of shape (T,) gives shape (T, K).

        Returns
        -------
        np.ndarray
            Shape (K,) or (T, K), in [0, 1].
        """
        t = np.asarray(t, dtype=float)[..., None]
        phase = 2 * np.pi * (t - self.peak_seconds) / self.period_seconds
        return np.clip(self.base * (1 + self.amplitude * np.cos(phase)), 0.0, 1.0)

    def slot_flags(self, slot: int) -> np.ndarray:
        """Return who is available in slot ``slot`` (>= 0): bool, shape (K,)."""
        u = stream("diurnal-slot", self.seed, slot).random(self.num_clients)
        return u < self.probabilities(slot * self.slot_seconds)

    def available_at(self, t: float) -> list[int]:
        """Return the clients available in the slot that ``t`` falls in."""
        return np.flatnonzero(self.slot_flags(slot_of(t, self.slot_seconds))).tolist()


# ----------------------------------------------------------------------- scenario
def clock_availability(
    config: ClockAvailabilityConfig,
    num_clients: int,
    seed: int,
    oracle: RoundIndexed | None = None,
) -> AvailableAt:
    """Build a scenario's ``time.availability`` for one seed.

    Parameters
    ----------
    config : ClockAvailabilityConfig
        The section, schema-checked (:class:`fedram_flwr.scenario.config.TimeConfig`).
    num_clients : int
        K, ``data.num_clients``.
    seed : int
        The run's seed.
    oracle : RoundIndexed, optional
        The scenario's round-indexed oracle; required for law ``rounds``.

    Returns
    -------
    AvailableAt

    Raises
    ------
    ValueError
        Naming ``time.availability``'s field: a trace file that is missing or malformed,
        or law ``rounds`` without an oracle.
    """
    if config.law == "rounds":
        if oracle is None:
            raise ValueError("time.availability.law: rounds needs the scenario's oracle")
        return RoundTicks(oracle, config.tick_seconds)
    if config.law == "fedscale":
        path = Path(config.path)
        where = f"time.availability.path: {path}"
        if not path.is_file():
            raise ValueError(f"{where}: trace file not found")
        try:
            traces = json.loads(path.read_text())
        except (UnicodeDecodeError, json.JSONDecodeError) as err:
            raise ValueError(f"{where}: not a JSON behaviour trace ({err})") from None
        if not isinstance(traces, dict):
            raise ValueError(f"{where}: expected an object mapping client ids to records")
        behaviours = read_fedscale(
            path, traces, num_clients, config.clients, field="time.availability"
        )
        return TraceAvailability(behaviours, config.start_time)
    base = np.broadcast_to(np.asarray(config.base, dtype=float), (num_clients,))
    return DiurnalLaw(
        base,
        config.amplitude,
        np.asarray(config.peak_seconds, dtype=float),
        seed,
        config.period_seconds,
        config.slot_seconds,
    )
