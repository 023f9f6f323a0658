"""The legacy engines on a simulated clock: round policies.

A scenario with a ``time:`` section runs its rounds on a
:class:`~fedram_flwr.clock.SimulatedClock`, in every engine and both Flower APIs. The
round itself is Flower-free, :mod:`fedram_flwr.clock.rounds` (who starts, the policy,
the late updates, the clock); this module builds a scenario's
:class:`~fedram_flwr.clock.rounds.TimeModel` (:func:`time_model`) and holds the legacy
API's thin caller, :class:`TimedServer` (the Message API's is
:class:`~fedram_flwr.message_api.timed.TimedAvailability`). Each round it:

1. asks :func:`~fedram_flwr.clock.rounds.start_clients` who starts, and has the oracle
   relay exactly those (:class:`~fedram_flwr.clock.rounds.ClockedDraws`); the strategy
   configures the round as ever;
2. lets every instructed client train (a dropped client's work is spent all the same);
3. hands :func:`~fedram_flwr.clock.rounds.finish_round` the replies by partition id,
   passes the strategy the ones it keeps (late updates re-based with :func:`rebased`)
   and records the round's clock
   (:meth:`~fedram_flwr.rundir.outputs.RoundRecorder.record_time`).

With every client equally fast, no deadline and ``tick_seconds`` the common round
duration, every round asks the oracle's next round and uses every reply: the run is the
round-based run, bit for bit (tests/engines/test_timed.py).
"""

from __future__ import annotations

from dataclasses import replace
from types import SimpleNamespace
from typing import Any

from flwr.common import Code, FitIns, FitRes, Parameters, Status
from flwr.server.client_proxy import ClientProxy
from flwr.server.server import FitResultsAndFailures
from flwr.serverapp.strategy import Strategy as MessageStrategy

from fedram_flwr.availability import OracleClientManager
from fedram_flwr.availability.timed import AvailableAt, clock_availability
from fedram_flwr.clients.emulate import round_task
from fedram_flwr.clients.models import get_weights
from fedram_flwr.clock import SimulatedClock, Task, scenario_speeds
from fedram_flwr.clock.policy import LateUpdate
from fedram_flwr.clock.rounds import (
    ClockedDraws,
    InFlight,
    TimedState,
    TimeModel,
    finish_round,
    late_rule,
    rebase_arrays,
    start_clients,
)
from fedram_flwr.engines.experiment import Experiment
from fedram_flwr.engines.resume import ResumableServer
from fedram_flwr.message_api import with_availability
from fedram_flwr.message_api.availability import AvailabilityStrategy
from fedram_flwr.message_api.timed import TimedAvailability
from fedram_flwr.message_api.wall import WallClockAvailability
from fedram_flwr.protocol import npy_array, npy_bytes, parameter_arrays
from fedram_flwr.rundir.checkpoint import CheckpointError
from fedram_flwr.scenario.config import TimeConfig
from fedram_flwr.scenario.schema import ScenarioError

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
    the model's float bytes each way; the task an emulating ClientApp times itself by
    (:func:`~fedram_flwr.clients.emulate.round_task`)."""
    sizes = [len(y) for y in exp.data.client_y]
    return round_task(exp.scenario.training, sizes, get_weights(exp.new_model()))


def clock_available(config: TimeConfig, manager: OracleClientManager, seed: int) -> AvailableAt:
    """Who is available at t: ``time.availability``'s law, over the oracle's own
    ``draw`` for law rounds (taken before :class:`ClockedDraws` replaces it)."""
    draw = manager.draw
    draw = draw.original if isinstance(draw, ClockedDraws) else draw
    own = SimpleNamespace(num_clients=manager.num_clients, draw=draw)
    return clock_availability(config.availability, manager.num_clients, seed, own)


def time_model(exp: Experiment, manager: OracleClientManager) -> TimeModel:
    """The scenario's ``time:`` section built for ``exp``'s seed."""
    config = exp.scenario.time
    if config.clock == "wall":
        raise ScenarioError(
            "time.clock: wall runs through the Message API (fedram run --api message, or "
            "the ServerApp's api = message); the legacy API's rounds are on the simulated "
            "clock only"
        )
    return TimeModel(
        speeds=scenario_speeds(config.speeds, exp.scenario.data.num_clients, exp.seed),
        available=clock_available(config, manager, exp.seed),
        task=scenario_task(exp),
        policy=config.policy,
        idle_s=idle_seconds(config),
    )


def rebased(res: FitRes, sent: Parameters, current: Parameters) -> FitRes:
    """``res`` with its arrays moved onto ``current``
    (:func:`~fedram_flwr.clock.rounds.rebase_arrays`)."""
    moved = rebase_arrays(
        parameter_arrays(res.parameters),
        [npy_array(t) for t in sent.tensors],
        [npy_array(t) for t in current.tensors],
    )
    params = Parameters([npy_bytes(a) for a in moved], res.parameters.tensor_type)
    return replace(res, parameters=params)


Reply = tuple[ClientProxy, FitRes]


class TimedServer(ResumableServer):
    """The engines' legacy server on a simulated clock (see the module docstring)."""

    def __init__(self, *, time: TimeModel, seed: int, **kwargs) -> None:
        super().__init__(**kwargs)
        manager = self.client_manager()
        self.draws = ClockedDraws(manager.draw)
        manager.draw = self.draws  # type: ignore[method-assign]
        self.time = time
        self.timed: TimedState[Reply] = TimedState(SimulatedClock(seed))

    @property
    def clock(self) -> SimulatedClock:
        """The clock at the next round's start."""
        return self.timed.clock

    def fit_round(self, server_round: int, timeout: float | None):
        """One round on the clock: the oracle relays the clients the round starts;
        Flower's ``fit_round`` otherwise (:meth:`received` applies the policy)."""
        self.timed, started = start_clients(self.time, self.timed, server_round)
        self.draws.rounds[server_round] = started.tolist()
        return super().fit_round(server_round, timeout)

    def received(self, server_round, instructions, results, failures) -> FitResultsAndFailures:
        """Every instructed client trained; the policy keeps the replies that reach this
        round and adds the late ones that arrive in it."""
        return self.apply_time(server_round, instructions or [], results), failures

    def apply_time(
        self, r: int, instructions: list[tuple[ClientProxy, FitIns]], results: list[Reply]
    ) -> list[Reply]:
        """Round ``r``'s replies under the policy; the clock moved on, the row recorded."""
        cids = [p.cid for p, _ in instructions] + [p.cid for p, _ in results]
        pid = self.client_manager().partitions.partition_of(cids)  # type: ignore[attr-defined]
        current = self.parameters

        def rebase(reply: Reply, sent: Parameters) -> Reply:
            return reply[0], rebased(reply[1], sent, current)

        out = finish_round(
            self.time,
            self.timed,
            r,
            {pid[p.cid]: ins.parameters for p, ins in instructions},
            [(pid[p.cid], (p, res)) for p, res in results],
            late_rule=late_rule(self.strategy),
            rebase=rebase,
        )
        self.timed = out.state
        recorder = getattr(self.strategy, "record_time", None)
        if recorder is not None:  # the round's clock in the recorder's row
            recorder(out.row)
        return out.kept

    def checkpoint(self) -> dict[str, Any]:
        """The strategy's checkpoint, and the clock and the late updates in flight
        (:func:`in_flight_record`) under ``"clock"``."""
        pending = [in_flight_record(p) for p in self.timed.pending]
        return {**super().checkpoint(), "clock": {"clock": self.timed.clock, "pending": pending}}

    def restore(self, saved: dict[str, Any]) -> None:
        """Take back what :meth:`checkpoint` gave; :class:`CheckpointError` (nothing
        changed) for a late update of a client not connected or not a reply."""
        proxies = self.client_manager().all()
        try:
            pending = tuple(in_flight(r, proxies) for r in saved["clock"]["pending"])
        except (KeyError, TypeError, ValueError) as err:
            raise CheckpointError(f"not this run's (clock.pending: {err!r})") from None
        super().restore(saved)
        self.timed = TimedState(saved["clock"]["clock"], pending)


def message_availability(
    exp: Experiment, strategy: MessageStrategy, oracle: OracleClientManager
) -> AvailabilityStrategy:
    """``strategy`` under ``oracle``: on the simulated clock when ``exp``'s scenario has a
    ``time:`` section (:class:`~fedram_flwr.message_api.timed.TimedAvailability`), else
    :func:`~fedram_flwr.message_api.with_availability`."""
    if exp.scenario.time is None:
        return with_availability(strategy, oracle)
    if exp.scenario.time.clock == "wall":
        return WallClockAvailability(strategy, oracle, exp.scenario.time.policy, seed=exp.seed)
    return TimedAvailability(strategy, oracle, time_model(exp, oracle), exp.seed)


def in_flight_record(update: InFlight[Reply]) -> dict[str, Any]:
    """A late update in flight as a checkpoint holds it: its :class:`LateUpdate`, its
    client's ``cid``, the ``FitRes`` and the ``Parameters`` it was sent, field by field."""
    proxy, res = update.reply
    return {
        "update": update.update,
        "cid": proxy.cid,
        "status": [int(res.status.code.value), res.status.message],
        "tensors": list(res.parameters.tensors),
        "tensor-type": res.parameters.tensor_type,
        "num-examples": res.num_examples,
        "metrics": dict(res.metrics),
        "sent": list(update.sent.tensors),
        "sent-type": update.sent.tensor_type,
    }


def in_flight(record: dict[str, Any], proxies: dict[str, ClientProxy]) -> InFlight[Reply]:
    """The late update :func:`in_flight_record` saved, its client's proxy among
    ``proxies`` (by ``cid``)."""
    if not isinstance(record["update"], LateUpdate):
        raise TypeError(f"update: a {type(record['update']).__name__}, not a LateUpdate")
    status = Status(Code(record["status"][0]), str(record["status"][1]))
    params = Parameters(list(record["tensors"]), str(record["tensor-type"]))
    res = FitRes(status, params, int(record["num-examples"]), dict(record["metrics"]))
    sent = Parameters(list(record["sent"]), str(record["sent-type"]))
    return InFlight(record["update"], (proxies[record["cid"]], res), sent)
