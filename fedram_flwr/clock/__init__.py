"""The time model: device speeds, completion times, a simulated clock.

Numpy only, no Flower: importable by a round driver at any layer above the schema.

- :mod:`.speeds`: each client's compute speed (ms per sample) and bandwidth (kbit/s),
  from log-normal laws or FedScale's device-capacity records; FedScale's completion
  time of a task (:func:`completion_time`);
- :mod:`.simclock`: :class:`SimulatedClock` (a run's seconds and rounds, an explicit
  value), :class:`Task` and :func:`start_round` (when each started client finishes);
- :mod:`.scenario`: a scenario's ``time.speeds`` section made into :class:`DeviceSpeeds`.

Availability on the clock (who is available at t) is
:mod:`fedram_flwr.availability.timed`, beside the round-indexed oracles it adapts.
"""

from fedram_flwr.clock.scenario import scenario_speeds
from fedram_flwr.clock.simclock import (
    TICK_SECONDS,
    RoundTiming,
    SimulatedClock,
    Task,
    start_round,
)
from fedram_flwr.clock.speeds import (
    AUGMENTATION_FACTOR,
    CompletionTime,
    DeviceSpeeds,
    capacity_speeds,
    completion_time,
    lognormal,
    lognormal_speeds,
    model_size_kbit,
    read_device_capacity,
)

__all__ = [
    "AUGMENTATION_FACTOR",
    "TICK_SECONDS",
    "CompletionTime",
    "DeviceSpeeds",
    "RoundTiming",
    "SimulatedClock",
    "Task",
    "capacity_speeds",
    "completion_time",
    "lognormal",
    "lognormal_speeds",
    "model_size_kbit",
    "read_device_capacity",
    "scenario_speeds",
    "start_round",
]
