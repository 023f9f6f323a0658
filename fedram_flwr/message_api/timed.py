"""The Message API on a simulated clock: round policies for any engine.

:class:`TimedAvailability` is :class:`~fedram_flwr.message_api.availability.AvailabilityStrategy`
whose oracle relays, in round r, the clients a timed round starts, and whose
``aggregate_train`` hands the wrapped strategy the replies the round policy keeps. The
round is the Flower-free :mod:`fedram_flwr.clock.rounds`, which the legacy API's
:class:`~fedram_flwr.engines.timed.TimedServer` calls too, so both APIs give the same
run bit for bit, in every engine:

- ``configure_train``: :func:`~fedram_flwr.clock.rounds.start_clients` says who starts
  at the clock's time; the oracle's ``draw`` of the round is those
  (:class:`~fedram_flwr.clock.rounds.ClockedDraws`); the wrapped strategy configures the
  round on them as ever, and what each node is sent is kept;
- ``aggregate_train``: every instructed node trained and replied (the clock is
  simulated: the replies are taken as they arrive, whenever that is, and the simulated
  deadline applied to them after); :func:`~fedram_flwr.clock.rounds.finish_round` says
  which replies the round uses and which late updates of earlier rounds arrive in it
  (re-based on the current broadcast where the core's ``late_updates`` is
  ``"rebase"``: :func:`with_arrays`); the wrapped strategy aggregates those, and the
  round's clock waits in :attr:`TimedAvailability.clocked` for the recorder
  (:class:`~fedram_flwr.engines.message_recording.MessageRecordingStrategy`).

The ``connected`` oracle (whoever is connected is available) has no clock and is refused.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import numpy as np
from flwr.app import Array, ArrayRecord, ConfigRecord, Message, RecordDict
from flwr.serverapp import Grid
from flwr.serverapp.strategy import Strategy

from fedram_flwr.availability.connected import ConnectedClientManager
from fedram_flwr.availability.manager import OracleClientManager
from fedram_flwr.clock.rounds import (
    ClockedDraws,
    TimedState,
    TimeModel,
    finish_round,
    late_rule,
    rebase_arrays,
    start_clients,
)
from fedram_flwr.clock.simclock import SimulatedClock
from fedram_flwr.message_api.availability import AvailabilityStrategy


@dataclass(frozen=True)
class ClockedRound:
    """One timed round as the recorder reads it.

    Parameters
    ----------
    replies : list of Message
        The replies the wrapped strategy aggregated (the kept ones, then the errors).
    row : dict
        The round's clock (:meth:`~fedram_flwr.rundir.outputs.RoundRecorder.record_time`).
    """

    replies: list[Message]
    row: dict[str, Any]


def array_record(message: Message) -> ArrayRecord:
    """Return a message's arrays as one ``ArrayRecord`` (an empty one if none).

    A train message's model, then what its algorithm sends beside it
    (:data:`~fedram_flwr.protocol.ALGORITHM_ARRAYS`): the layout its replies come back in.
    """
    records = list(message.content.array_records.values())
    if len(records) < 2:
        return records[0] if records else ArrayRecord()
    return ArrayRecord([a for record in records for a in record.to_numpy_ndarrays()])


def with_arrays(message: Message, arrays: list[np.ndarray]) -> Message:
    """Return a copy of ``message`` whose ``ArrayRecord`` holds ``arrays``.

    Parameters
    ----------
    message : Message
        A reply with one ``ArrayRecord``.
    arrays : list of np.ndarray
        The new arrays, in the record's order (under its keys).

    Returns
    -------
    Message
        The same metadata and other records; ``message`` is unchanged.
    """
    content = message.content
    key = next(iter(content.array_records))
    names = list(content.array_records[key].keys())
    record = ArrayRecord({k: Array(np.asarray(a)) for k, a in zip(names, arrays)})
    out = copy.copy(message)
    out.content = RecordDict({**dict(content.items()), key: record})
    return out


def rebaser(strategy: Strategy) -> Callable[[Message, ArrayRecord], Message]:
    """Return ``rebase(reply, sent)``: a late reply moved onto ``strategy``'s model now.

    The model now is the core's full broadcast (``broadcast_arrays()``) where the
    strategy has one, else what the client was sent
    (:func:`~fedram_flwr.clock.rounds.rebase_arrays`; the reply is a copy,
    :func:`with_arrays`).
    """
    broadcast = getattr(strategy, "broadcast_arrays", None)

    def rebase(reply: Message, sent: ArrayRecord) -> Message:
        current = broadcast() if callable(broadcast) else sent.to_numpy_ndarrays()
        mine = array_record(reply).to_numpy_ndarrays()
        return with_arrays(reply, rebase_arrays(mine, sent.to_numpy_ndarrays(), current))

    return rebase


class TimedAvailability(AvailabilityStrategy):
    """An availability wrapper on a simulated clock (see the module docstring).

    Parameters
    ----------
    strategy : Strategy
        Any Message-API strategy (late updates reach only a core's, per its
        ``late_updates``).
    oracle : OracleClientManager
        The scenario's oracle (its ``draw`` is replaced by the clock's).
    time : TimeModel
        The run's time model (:func:`~fedram_flwr.engines.timed.time_model`).
    seed : int
        The run's seed (the clock's).
    **settings : float
        ``wait_timeout``, ``query_timeout``, ``poll_interval``, ``max_failed_rounds`` of
        :class:`~fedram_flwr.message_api.availability.AvailabilityStrategy`.

    Attributes
    ----------
    clocked : dict of int to ClockedRound
        Round -> what it aggregated and its clock, until the recorder takes it.

    Raises
    ------
    ValueError
        Under the ``connected`` oracle.
    """

    def __init__(
        self,
        strategy: Strategy,
        oracle: OracleClientManager,
        time: TimeModel,
        seed: int,
        **settings: float,
    ) -> None:
        if isinstance(oracle, ConnectedClientManager):
            raise ValueError(
                "availability.oracle: connected has no clock (whoever is connected is "
                "available); a time section needs another oracle"
            )
        super().__init__(strategy, oracle, **settings)
        self.draws = ClockedDraws(oracle.draw)
        oracle.draw = self.draws  # type: ignore[method-assign]
        self.time = time
        self.timed: TimedState[Message] = TimedState(SimulatedClock(seed))
        self.sent: dict[int, ArrayRecord] = {}  # partition -> its arrays, this round
        self.clocked: dict[int, ClockedRound] = {}

    def configure_train(
        self, server_round: int, arrays: ArrayRecord, config: ConfigRecord, grid: Grid
    ) -> Iterable[Message]:
        """Configure the round on the clients it starts (module docstring).

        Arguments as for Flower's ``Strategy.configure_train``.
        """
        self.timed, started = start_clients(self.time, self.timed, server_round)
        self.draws.rounds[server_round] = started.tolist()
        messages = list(super().configure_train(server_round, arrays, config, grid))
        self.sent = {self.partition_of[m.metadata.dst_node_id]: array_record(m) for m in messages}
        return messages

    def aggregate_train(self, server_round: int, replies: Iterable[Message]) -> Any:
        """Aggregate the replies the round policy keeps (module docstring).

        Arguments and result as for Flower's ``Strategy.aggregate_train``.
        """
        replies = list(replies)
        errors = [m for m in replies if m.has_error()]
        ok = [(self.partition_of[m.metadata.src_node_id], m) for m in replies if not m.has_error()]
        out = finish_round(
            self.time,
            self.timed,
            server_round,
            self.sent,
            ok,
            late_rule=late_rule(self.strategy),
            rebase=rebaser(self.strategy),
        )
        self.timed, self.sent = out.state, {}
        self.clocked[server_round] = ClockedRound(out.kept + errors, out.row)
        return super().aggregate_train(server_round, out.kept + errors)
