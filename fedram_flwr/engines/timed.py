"""The in-process engine on a simulated clock (issue 28, item 3): round policies.

A scenario with a ``time:`` section runs its rounds on a
:class:`~fedram_flwr.clock.SimulatedClock`. Each round :class:`TimedServer`:

1. asks who is available at the clock's time (:func:`clock_available`: the
   ``time.availability`` law; law ``rounds``, the default, reads the scenario's
   ``availability:`` oracle one round per ``tick_seconds``), leaving out the clients
   still busy with a late update; an over-selecting round starts ceil(over x select) of
   them (:func:`~fedram_flwr.clock.policy.over_selected`). The oracle relays exactly
   those to the strategy, which configures the round as ever;
2. every instructed client trains (a dropped client's work is spent all the same);
3. computes when each finishes (:func:`~fedram_flwr.clock.start_round`: FedScale's
   completion time of :func:`scenario_task`), and the policy
   (:func:`~fedram_flwr.clock.policy.apply_policy`) says whose updates this round
   aggregates, which are late (``late: keep``) and which are dropped;
4. hands the strategy the used replies plus the late updates of earlier rounds that
   arrive by the round's end, when its core can use them (``Core.late_updates``:
   re-based on the current model for the stale-update memories, as sent for FedAWE;
   dropped for the others), and records the round's clock
   (:meth:`~fedram_flwr.outputs.RoundRecorder.record_time`);
5. moves the clock on by the realised duration; a round nobody started in lasts one step
   of the availability law (:func:`idle_seconds`).

With every client equally fast, no deadline and ``tick_seconds`` the common round
duration, every round asks the oracle's next round and uses every reply: the run is the
round-based run, bit for bit (tests/engines/test_timed.py).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from types import SimpleNamespace

import numpy as np
from flwr.common import FitIns, FitRes, Parameters
from flwr.server.client_proxy import ClientProxy
from flwr.server.server import FitResultsAndFailures

from fedram_flwr.availability import OracleClientManager
from fedram_flwr.availability.timed import AvailableAt, clock_availability
from fedram_flwr.clock import (
    DeviceSpeeds,
    SimulatedClock,
    Task,
    model_size_kbit,
    scenario_speeds,
    start_round,
)
from fedram_flwr.clock.policy import LateUpdate, apply_policy, arrived, over_selected
from fedram_flwr.config import RoundPolicyConfig, TimeConfig
from fedram_flwr.engines.resume import ResumableServer
from fedram_flwr.experiment import Experiment
from fedram_flwr.models import get_weights
from fedram_flwr.protocol import npy_array, npy_bytes
from fedram_flwr.training import num_local_steps

FEDSCALE_IDLE_SECONDS = 60.0
"""How long a round nobody starts in lasts under a FedScale behaviour trace."""


def idle_seconds(config: TimeConfig) -> float:
    """Seconds a round in which nobody starts lasts: one step of the availability law
    (``tick_seconds`` for law rounds, ``slot_seconds`` for diurnal), a minute
    (:data:`FEDSCALE_IDLE_SECONDS`) for a FedScale trace."""
    av = config.availability
    if av.law == "rounds":
        return av.tick_seconds
    if av.law == "diurnal":
        return av.slot_seconds
    return FEDSCALE_IDLE_SECONDS


def scenario_task(exp: Experiment) -> Task:
    """One round's work in FedScale's terms: ``training.batch_size``, each client's
    local steps (``training.local_steps``, or ``local_epochs`` passes over its data) and
    the model's float bytes each way."""
    t, d = exp.scenario.training, exp.data
    steps = tuple(
        num_local_steps(len(y), t.batch_size, t.local_epochs, t.local_steps) for y in d.client_y
    )
    size = model_size_kbit(sum(int(a.nbytes) for a in get_weights(exp.new_model())))
    return Task(t.batch_size, steps, size, size)


class ClockedDraws:
    """An oracle's ``draw`` replaced by the clients a timed round started: round r
    relays what :class:`TimedServer` set for it (the oracle's own draw for a round it did
    not set)."""

    def __init__(self, original) -> None:
        self.original = original
        self.rounds: dict[int, list[int]] = {}

    def __call__(self, server_round: int) -> list[int]:
        if server_round in self.rounds:
            return list(self.rounds[server_round])
        return self.original(server_round)


def clock_available(config: TimeConfig, manager: OracleClientManager, seed: int) -> AvailableAt:
    """Who is available at t: ``time.availability``'s law, over the oracle's own
    ``draw`` for law rounds (taken before :class:`ClockedDraws` replaces it)."""
    draw = manager.draw
    draw = draw.original if isinstance(draw, ClockedDraws) else draw
    own = SimpleNamespace(num_clients=manager.num_clients, draw=draw)
    return clock_availability(config.availability, manager.num_clients, seed, own)


@dataclass(frozen=True)
class TimeModel:
    """What a timed run reads each round: devices, availability, task and policy."""

    speeds: DeviceSpeeds
    available: AvailableAt
    task: Task
    policy: RoundPolicyConfig
    idle_s: float


def time_model(exp: Experiment, manager: OracleClientManager) -> TimeModel:
    """The scenario's ``time:`` section built for ``exp``'s seed."""
    config = exp.scenario.time
    return TimeModel(
        speeds=scenario_speeds(config.speeds, exp.scenario.data.num_clients, exp.seed),
        available=clock_available(config, manager, exp.seed),
        task=scenario_task(exp),
        policy=config.policy,
        idle_s=idle_seconds(config),
    )


@dataclass(frozen=True, eq=False)
class Pending:
    """A late update in flight: when it arrives, the reply and the arrays it was sent."""

    update: LateUpdate
    proxy: ClientProxy
    res: FitRes
    sent: Parameters


def rebased(res: FitRes, sent: Parameters, current: Parameters) -> FitRes:
    """``res`` with its arrays moved onto ``current``: current + (reply - sent), so a
    core that reads an update as (model - reply) reads the one the client computed."""
    reply = [npy_array(t) for t in res.parameters.tensors]
    sent_a = [npy_array(t) for t in sent.tensors]
    now = [npy_array(t) for t in current.tensors]
    moved = [(c + (r - s)).astype(r.dtype) for r, s, c in zip(reply, sent_a, now)]
    params = Parameters([npy_bytes(a) for a in moved], res.parameters.tensor_type)
    return replace(res, parameters=params)


class TimedServer(ResumableServer):
    """The engines' server on a simulated clock (see the module docstring)."""

    def __init__(self, *, time: TimeModel, seed: int, **kwargs) -> None:
        super().__init__(**kwargs)
        manager = self.client_manager()
        self.draws = ClockedDraws(manager.draw)
        manager.draw = self.draws  # type: ignore[method-assign]
        self.time = time
        self.clock = SimulatedClock(seed)
        self.pending: tuple[Pending, ...] = ()

    def fit_round(self, server_round: int, timeout: float | None):
        """One round on the clock: the oracle relays the clients the round starts;
        Flower's ``fit_round`` otherwise (:meth:`received` applies the policy)."""
        policy = self.time.policy
        busy = {p.update.client for p in self.pending}
        available = [c for c in self.time.available.available_at(self.clock.now) if c not in busy]
        started = np.asarray(available, dtype=int)
        if policy.kind == "over-selection":
            started = over_selected(
                started, policy.select, policy.over, self.clock.seed, server_round
            )
        self.draws.rounds[server_round] = started.tolist()
        self._available = len(available)
        return super().fit_round(server_round, timeout)

    def received(self, server_round, instructions, results, failures) -> FitResultsAndFailures:
        """Every instructed client trained; the policy keeps the replies that reach this
        round and adds the late ones that arrive in it."""
        return self.apply_time(server_round, instructions or [], results), failures

    def apply_time(
        self,
        r: int,
        instructions: list[tuple[ClientProxy, FitIns]],
        results: list[tuple[ClientProxy, FitRes]],
    ) -> list[tuple[ClientProxy, FitRes]]:
        """Round ``r``'s replies under the policy; the clock moved on, the row recorded."""
        policy = self.time.policy
        sent = {int(p.cid): ins.parameters for p, ins in instructions}
        ids = np.asarray(sorted(sent), dtype=int)
        timing = start_round(self.clock, self.time.speeds, ids, self.time.task)
        out = apply_policy(
            policy.kind,
            ids,
            timing.cost.total,
            deadline_s=policy.deadline_s,
            select=policy.select,
            keep_late=policy.late == "keep",
        )
        duration = out.duration if ids.size else self.time.idle_s
        end = self.clock.now + duration
        used = set(out.used.tolist())
        # in-process proxies are named by partition id (cid "7": partition 7)
        by_id = {int(proxy.cid): (proxy, res) for proxy, res in results}
        # in arrival order, each as often as it came (RC-FL draws with replacement)
        kept = [(p, res) for p, res in results if int(p.cid) in used]
        came, still = arrived(tuple(p.update for p in self.pending), end)
        came_ids = {u.client for u in came}
        how = self.late_rule()
        staleness, refused = [], 0
        for p in self.pending:
            if p.update.client not in came_ids:
                continue
            if how is None:
                refused += 1
                continue
            res = rebased(p.res, p.sent, self.parameters) if how == "rebase" else p.res
            kept.append((p.proxy, res))
            staleness.append(r - p.update.started_round)
        still_ids = {u.client for u in still}
        new = tuple(
            Pending(LateUpdate(c, self.clock.now + s, r), *by_id[c], sent[c])
            for c, s in zip(out.late.tolist(), out.late_seconds.tolist())
            if c in by_id
        )
        self.pending = tuple(p for p in self.pending if p.update.client in still_ids) + new
        self.clock = self.clock.next_round(duration)
        self.record(
            {
                "sim-seconds": self.clock.now,
                "sim-round-seconds": duration,
                "available": self._available,
                "started": int(ids.size),
                "used": len(used),
                "late": int(out.late.size),
                "dropped": int(out.dropped.size) + refused,
                "late-delivered": len(staleness),
                "staleness": staleness,
                "not-used": sorted(out.late.tolist() + out.dropped.tolist()),
            }
        )
        return kept

    def late_rule(self) -> str | None:
        """How the strategy's core takes a late update (``Core.late_updates``)."""
        inner = getattr(self.strategy, "strategy", self.strategy)
        core = getattr(inner, "core", None)
        return getattr(core, "late_updates", None)

    def record(self, fields: dict) -> None:
        """The round's clock in the recorder's row (when the strategy records)."""
        recorder = getattr(self.strategy, "record_time", None)
        if recorder is not None:
            recorder(fields)
