"""Per-client device speeds and FedScale's completion time of a training task.

A client's device has a compute speed (milliseconds per sample, FedScale's
``computation``) and a link bandwidth (kbit/s, FedScale's ``communication``). Speeds
come from a law (:func:`lognormal_speeds`) or from FedScale's device-capacity data
(:func:`capacity_speeds`, :func:`read_device_capacity`).

FedScale (SymbioticLab/FedScale, commit 7ec441c, read for the formulas):

- ``fedscale/cloud/internal/client_metadata.py``, ``ClientMetadata.get_completion_time``:
  computation = augmentation_factor x batch_size x local_steps x compute_speed / 1000
  seconds (augmentation_factor = 3.0: "backward-pass takes around 2x the latency" of
  the profiled inference), communication = (upload_size + download_size) / bandwidth
  seconds. :func:`completion_time` is that formula, operation for operation.
- ``fedscale/cloud/aggregation/aggregator.py``, ``Aggregator.run``: the update size is
  ``sys.getsizeof(pickle.dumps(model)) / 1024.0 * 8.0`` "kbits" (KiB x 8), sent down and
  up each round; :func:`model_size_kbit` converts bytes the same way.
- ``Aggregator.client_register_handler``: FedScale's client c (ids from 1) takes the
  profile of key (c mod number of profiles), ``{"computation": 1.0, "communication":
  1.0}`` when that key is missing. Here partition k takes the k-th profile in ascending
  id order, or the id a scenario names (:func:`capacity_speeds`).
- ``--clock_factor`` (``fedscale/cloud/config_parser.py``) is parsed and scaled per
  model there but read by no completion time; nothing here models it.

FedScale ships its capacity data pickled; pickle runs code when loaded, so only JSON is
read here (:func:`read_device_capacity`), as for behaviour traces
(:mod:`fedram_flwr.availability.fedscale`).
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from fedram_flwr.rng import stream

AUGMENTATION_FACTOR = 3.0
"""FedScale's default ``augmentation_factor``: a training step costs 3 inferences."""


@dataclass(frozen=True, eq=False)  # arrays: compare the fields, not the values
class DeviceSpeeds:
    """Every client's device: compute speed and link bandwidth.

    Parameters
    ----------
    compute_ms_per_sample : np.ndarray
        Shape (K,), > 0: milliseconds one sample's inference takes (FedScale's
        ``computation``).
    bandwidth_kbps : np.ndarray
        Shape (K,), > 0: the link's kbit/s, both ways (FedScale's ``communication``).

    Raises
    ------
    ValueError
        If the shapes differ or a value is not a finite number > 0.
    """

    compute_ms_per_sample: np.ndarray
    bandwidth_kbps: np.ndarray

    def __post_init__(self) -> None:
        compute = np.asarray(self.compute_ms_per_sample, dtype=float)
        bandwidth = np.asarray(self.bandwidth_kbps, dtype=float)
        if compute.ndim != 1 or compute.shape != bandwidth.shape:
            raise ValueError(
                f"compute_ms_per_sample and bandwidth_kbps: need one value per client each, "
                f"got shapes {compute.shape} and {bandwidth.shape}"
            )
        for name, values in (("compute_ms_per_sample", compute), ("bandwidth_kbps", bandwidth)):
            bad = np.flatnonzero(~(np.isfinite(values) & (values > 0)))
            if bad.size:
                raise ValueError(f"{name}[{bad[0]}]: {float(values[bad[0]])!r} is not a number > 0")
        object.__setattr__(self, "compute_ms_per_sample", compute)
        object.__setattr__(self, "bandwidth_kbps", bandwidth)

    @property
    def num_clients(self) -> int:
        """K, the number of clients."""
        return int(self.compute_ms_per_sample.size)

    @classmethod
    def uniform(cls, num_clients: int, compute_ms_per_sample: float, bandwidth_kbps: float):
        """Give every client the same device.

        Parameters
        ----------
        num_clients : int
            K, >= 1.
        compute_ms_per_sample, bandwidth_kbps : float
            The one device's speeds, > 0.

        Returns
        -------
        DeviceSpeeds
        """
        return cls(
            np.full(num_clients, float(compute_ms_per_sample)),
            np.full(num_clients, float(bandwidth_kbps)),
        )


def lognormal(median: float, sigma: float, normals: np.ndarray) -> np.ndarray:
    """Map standard normals to a log-normal law: median x exp(sigma x z).

    Parameters
    ----------
    median : float
        The law's median, > 0 (exp of the mean of its log).
    sigma : float
        The standard deviation of its log, >= 0 (0: every value is the median, exactly).
    normals : np.ndarray
        Standard normal draws z.

    Returns
    -------
    np.ndarray
        Shape of ``normals``.

    Raises
    ------
    ValueError
        If ``median`` <= 0 or ``sigma`` < 0 (or either is not finite).
    """
    if not (math.isfinite(median) and median > 0):
        raise ValueError(f"median: {median!r} is not a number > 0")
    if not (math.isfinite(sigma) and sigma >= 0):
        raise ValueError(f"sigma: {sigma!r} is not a number >= 0")
    return median * np.exp(sigma * np.asarray(normals, dtype=float))


def lognormal_speeds(
    num_clients: int,
    seed: int,
    compute: tuple[float, float],
    bandwidth: tuple[float, float],
) -> DeviceSpeeds:
    """Draw every client's device from log-normal laws.

    Client k's two standard normals are the k-th pair of the ``device-speeds`` stream
    seeded by ``seed``: the same seed gives the same devices, and client k's device does
    not depend on how many clients there are (numpy fills the draws in order). The
    compute speed is median x exp(sigma z_k0), the bandwidth median x exp(sigma z_k1).

    Parameters
    ----------
    num_clients : int
        K, >= 1.
    seed : int
        The scenario seed.
    compute : tuple of float
        (median, sigma) of the milliseconds per sample.
    bandwidth : tuple of float
        (median, sigma) of the kbit/s.

    Returns
    -------
    DeviceSpeeds

    Raises
    ------
    ValueError
        Naming ``compute`` or ``bandwidth``, if a median is <= 0 or a sigma < 0.
    """
    z = stream("device-speeds", seed).standard_normal((num_clients, 2))
    out = []
    for name, (median, sigma), column in (("compute", compute, 0), ("bandwidth", bandwidth, 1)):
        try:
            out.append(lognormal(median, sigma, z[:, column]))
        except ValueError as err:
            raise ValueError(f"{name}.{err}") from None
    return DeviceSpeeds(*out)


# ------------------------------------------------------------ FedScale capacities
def read_device_capacity(path: Path) -> dict[str, Any]:
    """Read FedScale device-capacity data from a JSON file.

    The same structure as FedScale's pickled ``client_device_capacity``
    (``benchmark/dataset/data/device_info/README.md``): an object mapping client ids to
    ``{"computation": ms per sample, "communication": kbit/s}``. Convert a trusted
    pickle yourself: ``json.dump({str(k): v for k, v in pickle.load(f).items()}, out)``.

    Parameters
    ----------
    path : Path
        The ``.json`` file.

    Returns
    -------
    dict
        Client id (a string) -> record, unchecked (:func:`capacity_speeds` checks).

    Raises
    ------
    ValueError
        Naming the file, if it is missing, not JSON, or not an object.
    """
    if not path.is_file():
        raise ValueError(f"{path}: device capacity file not found")
    try:
        data = json.loads(path.read_text())
    except (UnicodeDecodeError, json.JSONDecodeError) as err:
        raise ValueError(f"{path}: not a JSON device capacity file ({err})") from None
    if not isinstance(data, dict):
        raise ValueError(
            f"{path}: expected an object mapping client ids to "
            '{"computation": ms per sample, "communication": kbit/s}'
        )
    return data


def _speed(where: str, record: Any, field: str) -> float:
    value = record.get(field) if isinstance(record, Mapping) else None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"{where}.{field}: missing or not a number")
    if not (math.isfinite(value) and value > 0):
        raise ValueError(f"{where}.{field}: {value!r} is not a number > 0")
    return float(value)


def capacity_speeds(
    capacity: Mapping[str, Any],
    num_clients: int,
    clients: Sequence[int] | None = None,
    where: str = "device capacity",
) -> DeviceSpeeds:
    """Give partition k the device of one FedScale capacity record.

    Parameters
    ----------
    capacity : mapping
        Client id (an integer, or a string of one) -> ``{"computation": ms per sample,
        "communication": kbit/s}`` (:func:`read_device_capacity`).
    num_clients : int
        K, >= 1.
    clients : sequence of int, optional
        Partition k takes record ``clients[k]``; default: the ids in ascending numeric
        order, the first K of them.
    where : str
        Names the source in errors (the file).

    Returns
    -------
    DeviceSpeeds

    Raises
    ------
    ValueError
        Naming ``where``, the client and the field: an id that is not an integer or
        repeats, too few records, a missing chosen id, a value that is not > 0.
    """
    ids: dict[int, Any] = {}
    for key in capacity:
        try:
            number = int(key)
        except (TypeError, ValueError):
            raise ValueError(f"{where}: client {key!r}: ids must be integers") from None
        if number in ids:
            raise ValueError(f"{where}: client {number} is given twice ({key!r})")
        ids[number] = key
    if clients is None:
        if len(ids) < num_clients:
            raise ValueError(f"{where}: holds {len(ids)} clients; {num_clients} are needed")
        clients = sorted(ids)[:num_clients]
    elif len(clients) != num_clients:
        raise ValueError(f"clients: has {len(clients)} ids; give one per client ({num_clients})")
    missing = [c for c in clients if c not in ids]
    if missing:
        raise ValueError(f"clients: client {missing[0]} is not in {where}")
    records = [(f"{where}: client {c}", capacity[ids[c]]) for c in clients]
    return DeviceSpeeds(
        np.array([_speed(w, r, "computation") for w, r in records]),
        np.array([_speed(w, r, "communication") for w, r in records]),
    )


# ---------------------------------------------------------------- completion time
def model_size_kbit(num_bytes: float) -> float:
    """Convert a model's size in bytes to FedScale's kbit: bytes / 1024 x 8.

    FedScale's ``Aggregator.run`` measures the pickled model this way; for a model of P
    float32 parameters, pass 4 P bytes.

    Parameters
    ----------
    num_bytes : float
        Bytes, >= 0.

    Returns
    -------
    float
    """
    return num_bytes / 1024.0 * 8.0


@dataclass(frozen=True, eq=False)
class CompletionTime:
    """The seconds each client's task takes, in FedScale's two parts.

    Parameters
    ----------
    computation : np.ndarray
        Seconds of local training, one per client.
    communication : np.ndarray
        Seconds of the model's download and the update's upload, one per client.
    """

    computation: np.ndarray
    communication: np.ndarray

    @property
    def total(self) -> np.ndarray:
        """Computation + communication, seconds (FedScale's ``roundDuration``)."""
        return self.computation + self.communication


def completion_time(
    compute_ms_per_sample: np.ndarray,
    bandwidth_kbps: np.ndarray,
    *,
    batch_size: int | np.ndarray,
    local_steps: int | np.ndarray,
    download_kbit: float,
    upload_kbit: float,
    augmentation_factor: float = AUGMENTATION_FACTOR,
) -> CompletionTime:
    """Compute FedScale's completion time of a training task, for many clients at once.

    ``ClientMetadata.get_completion_time`` (fedscale/cloud/internal/client_metadata.py),
    in the same order of floating-point operations::

        computation   = augmentation_factor * batch_size * local_steps * ms_per_sample / 1000
        communication = (upload_kbit + download_kbit) / bandwidth_kbps

    Parameters
    ----------
    compute_ms_per_sample, bandwidth_kbps : np.ndarray
        Each client's speeds (:class:`DeviceSpeeds`), > 0.
    batch_size, local_steps : int or np.ndarray
        The task's mini-batch size and local SGD steps (one for all, or one per client):
        batch_size x local_steps samples are trained on.
    download_kbit, upload_kbit : float
        The model sent to the client and the update it sends back, kbit
        (:func:`model_size_kbit`; FedScale sends the whole model both ways).
    augmentation_factor : float
        A training step's cost in inferences (FedScale: 3.0).

    Returns
    -------
    CompletionTime
        Seconds, one per client.
    """
    compute = np.asarray(compute_ms_per_sample, dtype=float)
    bandwidth = np.asarray(bandwidth_kbps, dtype=float)
    return CompletionTime(
        computation=augmentation_factor * batch_size * local_steps * compute / 1000.0,
        communication=(upload_kbit + download_kbit) / bandwidth,
    )
