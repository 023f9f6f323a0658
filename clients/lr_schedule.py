"""The local step size's schedule over rounds (``training.lr_schedule``), applied in one
place: :meth:`fedram_flwr.clients.training.LocalTrainer.train`, which every client of both
Flower APIs and every engine trains through.

- ``constant``: eta_l = the round's step size, untouched (the default; no arithmetic).
- ``inv-sqrt``: FedAWE's eta_l = eta_0 / sqrt(t / 10 + 1) (Xiang et al. 2024, App. J,
  Table 6), t the paper's global round counted from 0, i.e. our server round r - 1 (as the
  non-stationary oracles count it): rounds 1, 11, 21 step eta_0, eta_0 / sqrt(2),
  eta_0 / sqrt(3).

eta_0 is the round's step size before the schedule: ``training.lr``, or the ``lr`` the
strategy sends (FedAR's and the stale-update baselines' eta_t, ``training.lr`` when their
``lr_decay`` is 1), so a strategy's own decay and this schedule multiply.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from fedram_flwr.protocol import SERVER_ROUND

LR_SCHEDULES = ("constant", "inv-sqrt")
"""The values of ``training.lr_schedule`` (its ``Literal`` in
:mod:`fedram_flwr.scenario.config`)."""


def scheduled_lr(lr: float, schedule: str, config: Mapping[str, Any]) -> float:
    """The step size of this round: ``lr`` under ``schedule``, the round read from the train
    config's ``server-round`` (both APIs send it; the batch order is seeded from it too)."""
    if schedule == "constant":
        return lr
    if schedule != "inv-sqrt":
        raise ValueError(f"lr_schedule: unknown {schedule!r}; allowed values: {LR_SCHEDULES}")
    if SERVER_ROUND not in config:
        raise ValueError(
            f"lr_schedule inv-sqrt: the train config has no '{SERVER_ROUND}' "
            f"(sent: {sorted(config)}): the schedule needs the round"
        )
    server_round = int(config[SERVER_ROUND])
    if server_round < 1:
        raise ValueError(f"lr_schedule inv-sqrt: server round {server_round} is not >= 1")
    return lr / math.sqrt((server_round - 1) / 10 + 1)
