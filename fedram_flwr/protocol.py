"""The client/server wire contract: every key that crosses the wire, in one place.

Each constant names a key of a fit/evaluate config (server -> client), a fit metric
(client -> server) or a client property (client -> server, asked by the oracle), with
its direction and meaning. Both sides import the key from here; neither types it as a
literal. The packing helpers fix the layout of the arrays that carry more than a model:
(theta, t) for Fed-CVaR-Avg and RC-FL, (x, c) for SCAFFOLD. :class:`ClientReply` is a
fit result as the algorithm cores see it: no Flower type, so every face of a strategy
(the legacy ``Strategy``, the Message API) hands the same value to the same core.

No Flower import here, and nothing from the package: both sides import this module.
"""

from __future__ import annotations

import io
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

Arrays = list[np.ndarray]  # Flower's NDArrays, without importing Flower

# --------------------------------------------------------------- client -> server
PARTITION_ID = "partition-id"
"""property and fit metric (int): the client's partition id, 0..N-1. Oracles ask for it
with ``get_properties`` to know clients by id in every engine; strategies order results
by it so sums are the same whatever order replies arrive in."""

NUM_EXAMPLES = "num-examples"
"""property (int): m_i, the size of the client's training set. RC-FL's server reads it
to form p_i = m_i / m over the connected clients. Also a metric of every Message-API
reply, train and evaluate (Flower's ``weighted_by_key`` default)."""

TRAIN_LOSS = "train-loss"
"""fit metric (float): the mean mini-batch loss of the client's last local epoch."""

TRAIN_SECONDS = "train-seconds"
"""fit metric (float): wall time of the local SGD alone (benchmarks)."""

MODELLED_SECONDS = "modelled-seconds"
"""fit metric (float), with ``time.emulate`` only: the seconds the time model gives the
client's round, computation + communication (the simulated clock's completion time)."""

SLEPT_SECONDS = "slept-seconds"
"""fit metric (float), with ``time.emulate`` only: the seconds the ClientApp slept after
training so that its round took ``modelled-seconds`` (0 when training took longer)."""

RECEIVED_LOSS = "received-loss"
"""fit metric (float): F_k(w_t), the client's loss on its first mini-batch at the
received model (CA-Fed's F_k^(t), Alg. 1 line 3; AFL's and q-FFL's f_k(w_t))."""

LOCAL_OPTIMUM = "local-optimum-loss"
"""fit metric (float): F_k*, the client's minimum local loss (CA-Fed with
``loss_floor: local-optimum``); sent when the config carries REPORT_LOCAL_OPTIMUM."""

ALGORITHM_ARRAYS = "algorithm-arrays"
"""train message ArrayRecord: what an algorithm sends beside the model (Fed-CVaR-Avg's t,
rFedFair's eta, SCAFFOLD's control c), so that the message's ``"arrays"`` record is the
model alone under its state_dict keys (a handler's ``load_state_dict`` loads it); a client
block reads the model's arrays, then these, as one list."""

THRESHOLD_T = "t"
"""fit metric (float): Fed-CVaR-Avg's t after the client's local steps."""

THRESHOLD_ETA = "eta"
"""fit metric (float): RC-FL's eta after the client's local steps."""

EVAL_LOSS = "eval-loss"
"""evaluate metric (float): the client's mean cross-entropy at the received model (a
Message-API ``@app.evaluate()`` reply)."""

EVAL_ACCURACY = "eval-accuracy"
"""evaluate metric (float): the client's accuracy at the received model."""

# --------------------------------------------------------------- server -> client
SERVER_ROUND = "server-round"
"""fit config (int): the round t; seeds the client's batch order from (seed, t, id)."""

LR = "lr"
"""fit config (float): the client's step size this round (eta_t of FedAR and the
stale-update baselines); the client's own ``training.lr`` when absent."""

LOCAL_EPOCHS = "local-epochs"
"""fit config (int, optional): overrides the client's number of local epochs H."""

BATCH_SIZE = "batch-size"
"""fit config (int, optional): overrides the client's mini-batch size."""

CVAR_ALPHA = "cvar-alpha"
"""fit config (float): Fed-CVaR-Avg's CVaR level alpha (eq. 6)."""

CVAR_GAMMA = "cvar-gamma"
"""fit config (float): Fed-CVaR-Avg's trade-off gamma between CVaR and mean (eq. 6)."""

LR_T = "lr-t"
"""fit config (float): Fed-CVaR-Avg's step size eta_t of t (Alg. 1 line 8)."""

REPORT_LOCAL_OPTIMUM = "report-local-optimum"
"""fit config (bool): ask the client for LOCAL_OPTIMUM (CA-Fed, ``local-optimum``)."""

RCFL_ALPHA = "rcfl-alpha"
"""fit config (float): RC-FL's alpha_i of this client, in [p_i, 1] (Def. 1)."""

RCFL_P = "rcfl-p"
"""fit config (float): RC-FL's p_i = m_i / m of this client (the client checks alpha_i)."""

RCFL_MU = "rcfl-mu"
"""fit config (float): RC-FL's smoothing mu of phi_mu (Sec. 4)."""

LR_ETA = "lr-eta"
"""fit config (float): RC-FL's step size beta_eta of eta (Alg. 1)."""

PERIOD = "period"
"""fit config (int): Amplified SCAFFOLD's period (from 0) of the round; a client adopts
its pending control variate when it changes."""

# ------------------------------------------------------------- client-side state
SCAFFOLD_CONTROL = "scaffold-control"
"""``Context.state`` record (never on the wire): SCAFFOLD's client control variate c_i."""

FOCUS_GRADIENT = "focus-gradient"
"""``Context.state`` record (never on the wire): FOCUS's g_i^prev, the gradient of the
client's last local step in the last round it trained."""

SCAFFOLD_PENDING = "scaffold-pending"
"""``Context.state`` records (never on the wire): Amplified SCAFFOLD's D_i = c_i^new - c_i
of the period (an ArrayRecord) and, under ``SCAFFOLD_PENDING + "-meta"``, its period
and the local steps it pools (a ConfigRecord)."""


# ------------------------------------------------------------------- packing
def join_theta_t(theta: Sequence[np.ndarray], t: float) -> Arrays:
    """(theta, t) on the wire: theta's arrays followed by t as a 1-element float64 array
    (Fed-CVaR-Avg's (theta, t); RC-FL's (omega, eta))."""
    return [*theta, np.array([t], dtype=np.float64)]


def split_theta_t(arrays: Sequence[np.ndarray]) -> tuple[Arrays, float]:
    """Inverse of :func:`join_theta_t`."""
    return list(arrays[:-1]), float(arrays[-1].reshape(-1)[0])


def join_model_control(model: Sequence[np.ndarray], control: Sequence[np.ndarray]) -> Arrays:
    """SCAFFOLD on the wire: [x arrays..., c arrays...] to the client, [y_i arrays...,
    Delta c_i arrays...] back (the control shaped like the model)."""
    return [*model, *control]


def split_model_control(arrays: Sequence[np.ndarray]) -> tuple[Arrays, Arrays]:
    """Inverse of :func:`join_model_control`: [model..., control...] -> (model, control)."""
    half = len(arrays) // 2
    return list(arrays[:half]), list(arrays[half:])


# ---------------------------------------------------- arrays as bytes (Flower's format)
_NPY_HEADERS: dict[tuple[str, tuple[int, ...]], bytes] = {}
_NPY_LAYOUTS: dict[bytes, tuple[np.dtype, tuple[int, ...], int]] = {}


def npy_bytes(array: np.ndarray) -> bytes:
    """``array`` as Flower's ``ndarray_to_bytes`` writes it (``np.save``'s .npy bytes),
    byte for byte, with the header built once per (dtype, shape): ~20x cheaper for a
    small array. Object and Fortran-ordered arrays go through ``np.save`` itself."""
    a = np.asarray(array)
    if a.dtype.hasobject or (a.flags.f_contiguous and not a.flags.c_contiguous):
        return _np_save(a)
    key = (a.dtype.str, a.shape)
    if key not in _NPY_HEADERS:
        empty = _np_save(np.zeros(a.shape, a.dtype))
        _NPY_HEADERS[key] = empty[: len(empty) - a.nbytes]
    return _NPY_HEADERS[key] + a.tobytes("C")


def npy_array(data: bytes) -> np.ndarray:
    """Inverse of :func:`npy_bytes` (Flower's ``bytes_to_ndarray``: the same values, a
    fresh writable array), the header parsed (and the element count taken) once per
    distinct header."""
    major = data[6] if data[:6] == b"\x93NUMPY" else 0
    if major not in (1, 2, 3):
        return _np_load(data)
    size = 2 if major == 1 else 4
    offset = 8 + size + int.from_bytes(data[8 : 8 + size], "little")
    header = data[:offset]
    if header not in _NPY_LAYOUTS:
        probe = _np_load(data)
        if probe.dtype.hasobject or (probe.flags.f_contiguous and not probe.flags.c_contiguous):
            return probe
        _NPY_LAYOUTS[header] = (probe.dtype, probe.shape, probe.size)
    dtype, shape, count = _NPY_LAYOUTS[header]
    return np.frombuffer(data, dtype, count=count, offset=offset).reshape(shape).copy()


def parameter_arrays(parameters: Any) -> list[np.ndarray]:
    """The arrays of Flower ``Parameters`` (an object with ``.tensors``, ``.npy`` bytes):
    decoded (:func:`npy_array`), or, when they still hold their arrays (``.arrays``: an
    in-process reply, :class:`~fedram_flwr.clients.erm.ArrayParameters`), fresh C-ordered
    copies of them: what decoding their bytes gives, without making the bytes."""
    arrays = getattr(parameters, "arrays", None)
    if arrays is not None:
        return [np.array(a, copy=True, order="C") for a in arrays]
    return [npy_array(t) for t in parameters.tensors]


def _np_save(array: np.ndarray) -> bytes:
    out = io.BytesIO()
    np.save(out, array, allow_pickle=False)
    return out.getvalue()


def _np_load(data: bytes) -> np.ndarray:
    return np.load(io.BytesIO(data), allow_pickle=False)


# ------------------------------------------------------------- a client's reply
@dataclass(frozen=True)
class ClientReply:
    """One client's fit result, Flower-free: its partition id, m_i, its fit metrics and
    its arrays, decoded on demand by :meth:`arrays` (the memory strategies decode one
    reply at a time into a reused buffer instead of holding all of them)."""

    partition_id: int
    num_examples: int
    metrics: Mapping[str, Any]
    decode: Callable[[], Arrays]

    def arrays(self) -> Arrays:
        """The arrays the client returned (a fresh list each call)."""
        return self.decode()

    def metric(self, key: str) -> float:
        """The fit metric ``key`` as a float; names the key and client if it is missing."""
        if key not in self.metrics:
            raise ValueError(f"client {self.partition_id} sent no '{key}' fit metric")
        return float(self.metrics[key])


def reply_partition_id(metrics: Mapping[str, Any], required: bool, strategy: str) -> int:
    """The PARTITION_ID a reply's fit metrics carry; -1 when it has none and ``strategy``
    does not need one (FedAvg, Fed-CVaR-Avg: a stock Flower client); else an error
    naming the key and the strategy."""
    if PARTITION_ID in metrics:
        return int(metrics[PARTITION_ID])
    if required:
        raise ValueError(
            f"{strategy}: a client's reply has no '{PARTITION_ID}' fit metric; {strategy} "
            f"knows clients by partition id: report it (the node's "
            f"context.node_config['{PARTITION_ID}']) in the fit metrics"
        )
    return -1


def in_partition_order(replies: Iterable[ClientReply]) -> list[ClientReply]:
    """``replies`` by partition id (a stable sort: ids of -1 first, in arrival order), so
    that a round's sums are the same whatever order the replies arrived in."""
    return sorted(replies, key=lambda r: r.partition_id)
