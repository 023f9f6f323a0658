"""A scenario's ``time.speeds`` section made into every client's device."""

from __future__ import annotations

from pathlib import Path

from fedram_flwr.clock.speeds import (
    DeviceSpeeds,
    capacity_speeds,
    lognormal_speeds,
    read_device_capacity,
)
from fedram_flwr.scenario.config import SpeedsConfig


def scenario_speeds(config: SpeedsConfig, num_clients: int, seed: int) -> DeviceSpeeds:
    """Build the devices of ``time.speeds`` for one seed.

    Parameters
    ----------
    config : SpeedsConfig
        The section, schema-checked (:class:`fedram_flwr.scenario.config.TimeConfig`).
    num_clients : int
        K, ``data.num_clients``.
    seed : int
        The run's seed (log-normal draws).

    Returns
    -------
    DeviceSpeeds

    Raises
    ------
    ValueError
        Naming ``time.speeds``' field: a capacity file that is missing or malformed.
    """
    if config.law == "lognormal":
        c, b = config.compute_ms_per_sample, config.bandwidth_kbps
        return lognormal_speeds(num_clients, seed, (c.median, c.sigma), (b.median, b.sigma))
    path = Path(config.path)
    where = f"time.speeds.path: {path}"
    try:
        capacity = read_device_capacity(path)
        return capacity_speeds(capacity, num_clients, config.clients, where=where)
    except ValueError as err:
        message = str(err)
        if message.startswith("clients:"):
            raise ValueError(f"time.speeds.{message}") from None
        if not message.startswith(where):
            message = f"{where}: {message.removeprefix(f'{path}: ')}"
        raise ValueError(message) from None
