"""Conversions between Flower's legacy wire types and what the cores and the round driver see.

``Parameters`` <-> arrays by the protocol's codec (:func:`to_parameters`,
:func:`to_arrays`), a ``FitRes`` as the cores' :class:`~fedram_flwr.protocol.ClientReply`
(:func:`to_reply`) or as the round driver's
:class:`~fedram_flwr.strategies.round_driver.Received` (:func:`received`), a round's
failure as the log quotes it (:func:`failure_text`), and the round's warnings in Flower's
log (:func:`warn`). The legacy adapters (:mod:`~fedram_flwr.strategies.reply_aggregation`,
:mod:`~fedram_flwr.strategies.base`) use them; re-exported there.
"""

from __future__ import annotations

from functools import partial
from logging import WARNING

from flwr.common import FitRes, NDArrays, Parameters
from flwr.common.logger import log
from flwr.server.client_proxy import ClientProxy

from fedram_flwr.protocol import (
    PARTITION_ID,
    ClientReply,
    npy_bytes,
    parameter_arrays,
    reply_partition_id,
)
from fedram_flwr.strategies.round_driver import Received


def to_parameters(arrays: NDArrays) -> Parameters:
    """Encode arrays as Flower's ``ndarrays_to_parameters`` does, byte for byte.

    By the protocol's codec (:func:`~fedram_flwr.protocol.npy_bytes`; ~20x cheaper for a
    small model, which matters when it runs every round).

    Parameters
    ----------
    arrays : list of np.ndarray
        The arrays, any shapes and dtypes.

    Returns
    -------
    flwr.common.Parameters
        One ``.npy`` blob per array, ``tensor_type="numpy.ndarray"``.
    """
    return Parameters(tensors=[npy_bytes(a) for a in arrays], tensor_type="numpy.ndarray")


def to_arrays(parameters: Parameters) -> NDArrays:
    """Decode Flower ``Parameters`` into the arrays ``parameters_to_ndarrays`` gives.

    By the protocol's codec (:func:`~fedram_flwr.protocol.parameter_arrays`; an
    in-process reply's arrays are copied, not decoded).

    Parameters
    ----------
    parameters : flwr.common.Parameters
        One ``.npy`` blob per array.

    Returns
    -------
    list of np.ndarray
        The arrays, in order.
    """
    return parameter_arrays(parameters)


def client_id(res: FitRes) -> int:
    """Return the partition id a client reports in its fit metrics.

    Parameters
    ----------
    res : FitRes
        A client's fit result, with ``partition-id`` in its metrics.

    Returns
    -------
    int
        The partition id, >= 0 for the project's clients.
    """
    return int(res.metrics[PARTITION_ID])


def failure_text(failure: tuple[ClientProxy, FitRes] | BaseException) -> str:
    """Describe one failure of a round (Flower's ``failures`` entry) as the log quotes it.

    Parameters
    ----------
    failure : tuple of (ClientProxy, FitRes) or BaseException
        An entry of Flower's ``failures``: an exception, or a reply with a non-OK status.

    Returns
    -------
    str
        ``"ExcType: message"`` or ``"client <cid>: <status code>: <status message>"``.
    """
    if isinstance(failure, BaseException):
        return f"{type(failure).__name__}: {failure}"
    proxy, res = failure
    return f"client {proxy.cid}: {res.status.code.name}: {res.status.message}"


def received(proxy: ClientProxy | None, res: FitRes) -> Received[FitRes]:
    """Wrap a ``FitRes`` as the round driver screens it (its sender named by its proxy).

    Parameters
    ----------
    proxy : ClientProxy or None
        The sender (``None``: named "a client").
    res : FitRes
        Its fit result; its arrays are decoded only when the driver asks for them.

    Returns
    -------
    Received
        The reply, its sender's name, its claimed partition id and metrics.
    """
    sender = "a client" if proxy is None else f"client {proxy.cid}"
    return Received(
        res, sender, res.metrics.get(PARTITION_ID), res.metrics, partial(to_arrays, res.parameters)
    )


def warn(line: str) -> None:
    """Log a round's warning in Flower's log (level ``WARNING``).

    Parameters
    ----------
    line : str
        The warning, logged as is.
    """
    log(WARNING, "%s", line)


def to_reply(res: FitRes, needs_id: bool = True, strategy: str = "strategy") -> ClientReply:
    """Convert a ``FitRes`` into the reply the cores see; its arrays decode when asked for.

    Parameters
    ----------
    res : FitRes
        A client's fit result.
    needs_id : bool
        Whether the metrics must carry a partition id (``False``: plain FedAvg, which also
        serves stock Flower clients).
    strategy : str
        The strategy's name, for the error message.

    Returns
    -------
    ClientReply
        Partition id, m_i (``num_examples``), metrics and a lazy decoder of the arrays.

    Raises
    ------
    ValueError
        If ``needs_id`` and the metrics carry no valid partition id
        (:func:`~fedram_flwr.protocol.reply_partition_id`).
    """
    pid = reply_partition_id(res.metrics, needs_id, strategy)
    return ClientReply(pid, res.num_examples, res.metrics, lambda: parameter_arrays(res.parameters))
