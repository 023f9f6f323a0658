"""Where a client's mini-batches come from: the project's in-memory (x, y), each pass a
permutation seeded from (seed, round, id) (:class:`ArrayData`, :func:`array_pass`), or a
user's torch data loader in its own order (:class:`LoaderData`, ``to_xy`` for batches
that are not (inputs, labels) pairs). Local SGD (:mod:`fedram_flwr.clients.training`) takes either
as a :class:`ClientData`."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any, NamedTuple, Protocol

import numpy as np
import torch

from fedram_flwr.clients.models import on_device
from fedram_flwr.protocol import BATCH_SIZE, SERVER_ROUND
from fedram_flwr.rng import stream, streams

Batch = tuple[torch.Tensor, torch.Tensor]
"""One mini-batch: (inputs, integer labels)."""

OnePass = Callable[[], Iterable[Batch]]
"""Each call starts one pass (epoch) over a client's data."""


def batches_per_pass(num_examples: int, batch_size: int, drop_last: bool = False) -> int:
    """Mini-batches in one pass over a client's data: ceil(n / B), the last one smaller
    when B does not divide n (the default); with ``drop_last``, floor(n / B) full ones,
    as the peers' code (torch's ``DataLoader(drop_last=True)``) trains, except that a
    client with fewer than B examples keeps its one batch rather than taking no step."""
    if drop_last:
        return max(num_examples // batch_size, 1)
    return math.ceil(num_examples / batch_size)


def array_pass(
    x: np.ndarray | torch.Tensor,
    y: np.ndarray | torch.Tensor,
    batch_size: int,
    rng: np.random.Generator,
    drop_last: bool,
    device: torch.device | str | None = None,
) -> OnePass:
    """Passes over in-memory (x, y), arrays or tensors, kept on ``device`` (default:
    where they are; an array shares its memory on the CPU): each pass a fresh permutation
    drawn from ``rng`` and copied there, cut into ``batches_per_pass`` mini-batches of
    ``batch_size``, gathered by ``index_select``. Its ``plan(epochs, steps)`` attribute
    draws a whole round's steps at once instead (:class:`StepPlan`, :func:`step_rows`)."""
    xt, yt = kept_on(x, y, device)
    per_pass = batches_per_pass(len(yt), batch_size, drop_last)

    starts = range(0, per_pass * batch_size, batch_size)

    def index_pass() -> Iterable[torch.Tensor]:
        order = torch.from_numpy(rng.permutation(len(yt))).to(xt.device)
        # A slice of ``order`` per batch taken: ``order.split(batch_size)``'s pieces, without
        # making all of a large client's ceil(n / B) views when K steps take a few.
        return (order[i : i + batch_size] for i in starts)

    def one_pass() -> Iterable[Batch]:
        return ((xt.index_select(0, idx), yt.index_select(0, idx)) for idx in index_pass())

    # A round's steps drawn at once, as the passes draw them (stacked SGD gathers every
    # client's rows of a block of steps together: clients/batched.py).
    one_pass.plan = lambda epochs, steps: StepPlan(  # type: ignore[attr-defined]
        xt, yt, *step_rows(len(yt), batch_size, drop_last, rng, epochs, steps)
    )
    return one_pass


def kept_on(
    x: np.ndarray | torch.Tensor, y: np.ndarray | torch.Tensor, device: torch.device | str | None
) -> tuple[torch.Tensor, torch.Tensor]:
    """(x, y) as tensors on ``device`` (default: where they are; an array shares its
    memory on the CPU)."""
    where = None if device is None else torch.device(device)
    xt, yt = (torch.as_tensor(a) if where is None else on_device(a, where) for a in (x, y))
    return xt, yt


class StepPlan(NamedTuple):
    """A round's local steps over in-memory (x, y), drawn at once (:func:`step_rows`):
    ``rows[t, :sizes[t]]`` are step t's rows of (``x``, ``y``), the rest of ``rows[t]``
    padding (row 0); ``pass_lengths``: the steps of each pass; ``rows_of``: (X, Y, at)
    when x, y are rows ``at``.. of tensors X, Y that hold other clients' rows too (a
    node's data, :meth:`~fedram_flwr.clients.node.NodeExperiment.trainer`: stacked SGD
    gathers all their batches with one call)."""

    x: torch.Tensor
    y: torch.Tensor
    rows: np.ndarray
    sizes: np.ndarray
    pass_lengths: list[int]
    rows_of: tuple[torch.Tensor, torch.Tensor, int] | None = None


def step_rows(
    n: int,
    batch_size: int,
    drop_last: bool,
    rng: np.random.Generator,
    epochs: int,
    steps: int | None,
) -> tuple[np.ndarray, np.ndarray, list[int]]:
    """Every mini-batch of a round's local SGD over n examples as row indices, drawn as
    the passes of :func:`array_pass` draw them (a permutation of ``rng`` per pass started,
    cut into :func:`batches_per_pass` batches of ``batch_size``, the last one smaller
    unless ``drop_last``): ``epochs`` passes, or exactly ``steps`` steps (a pass started
    whenever one runs out). Returns (rows ``[steps, batch_size]``, padded with 0; each
    step's batch size; each pass's number of steps)."""
    if steps is None and epochs < 1:
        raise ValueError(f"local-epochs must be >= 1, got {epochs}")
    per_pass = batches_per_pass(n, batch_size, drop_last)
    if per_pass < 1:
        raise ValueError("local training: a pass over the client's data gave no mini-batch")
    total = epochs * per_pass if steps is None else steps
    passes = -(-total // per_pass)
    lengths = [per_pass] * (passes - 1) + [total - per_pass * (passes - 1)]
    full = min(n // batch_size, per_pass)  # full batches in a pass; then one of n - full * B
    sizes = np.full(total, batch_size, dtype=np.int64)
    if total <= full:  # one pass, full batches (most rounds of K local steps): no copy
        return rng.permutation(n)[: total * batch_size].reshape(total, batch_size), sizes, lengths
    rows = np.zeros((total, batch_size), dtype=np.int64)
    t = 0
    for length in lengths:
        order = rng.permutation(n)
        k = min(length, full)
        rows[t : t + k] = order[: k * batch_size].reshape(k, batch_size)
        if length > k:
            rest = order[k * batch_size :]
            rows[t + k, : len(rest)] = rest
            sizes[t + k] = len(rest)
        t += length
    return rows, sizes, lengths


def client_rng(seed: int, server_round: int, partition_id: int) -> np.random.Generator:
    """The generator of one client's draws in one round: seeded from (seed, round, id)."""
    return stream("client-batches", seed, server_round, partition_id)


def client_rngs(keys: Sequence[tuple[int, int, int]]) -> Iterator[np.random.Generator]:
    """:func:`client_rng` of each (seed, round, id) in ``keys``, seeded together
    (:func:`~fedram_flwr.rng.streams`: each generator valid until the next is taken)."""
    return streams("client-batches", keys)


class ClientData(Protocol):
    """A client's training data as local SGD sees it."""

    def __len__(self) -> int:
        """m_i, the number of training examples (``num-examples``)."""

    def passes(self, config: Mapping[str, Any]) -> OnePass:
        """The passes of one round, given the round's train config."""

    def full(self) -> tuple[Any, Any]:
        """All of (x, y) at once (CA-Fed's F_k*, a full-batch minimisation)."""


class ArrayData:
    """The project's in-memory (x, y) of client ``partition_id``: each pass a permutation
    drawn from the (seed, round, id) stream (:func:`client_rng`), so every engine and
    both of Flower's APIs train on the same batches. The config's ``batch-size``
    overrides ``batch_size``. (x, y): arrays or tensors; batches are gathered on
    ``device`` (default: where the tensors are, the CPU for arrays). ``rows_of``: (X, Y,
    at) when x, y are rows ``at``.. of tensors X, Y on ``device`` (:class:`StepPlan`)."""

    def __init__(
        self,
        x: np.ndarray | torch.Tensor,
        y: np.ndarray | torch.Tensor,
        *,
        batch_size: int,
        seed: int,
        partition_id: int,
        drop_last: bool = False,
        device: torch.device | str | None = None,
        rows_of: tuple[torch.Tensor, torch.Tensor, int] | None = None,
    ) -> None:
        self.x, self.y = x, y
        self.batch_size, self.seed, self.partition_id = batch_size, seed, partition_id
        self.drop_last, self.device, self.rows_of = drop_last, device, rows_of

    def __len__(self) -> int:
        return len(self.y)

    def passes(self, config: Mapping[str, Any]) -> OnePass:
        rng = client_rng(*self.stream_keys(config))
        return array_pass(self.x, self.y, self.batch_of(config), rng, self.drop_last, self.device)

    def plan(
        self,
        config: Mapping[str, Any],
        epochs: int,
        steps: int | None,
        rng: np.random.Generator | None = None,
    ) -> StepPlan:
        """The round's steps at once: the same draws as its :meth:`passes` would make
        (:func:`step_rows`) over ``epochs`` passes or ``steps`` steps; ``rng``: its
        round's generator when the caller has it (:func:`client_rngs`)."""
        if rng is None:
            rng = client_rng(*self.stream_keys(config))
        n, batch_size = self.y.shape[0], self.batch_of(config)
        rows = step_rows(n, batch_size, self.drop_last, rng, epochs, steps)
        return StepPlan(*kept_on(self.x, self.y, self.device), *rows, self.rows_of)

    def stream_keys(self, config: Mapping[str, Any]) -> tuple[int, int, int]:
        """(seed, round, id): the keys of the round's generator (:func:`client_rng`)."""
        return self.seed, int(config.get(SERVER_ROUND, 0)), self.partition_id

    def batch_of(self, config: Mapping[str, Any]) -> int:
        """The round's batch size: the config's, else the default."""
        return int(config.get(BATCH_SIZE, self.batch_size))

    def full(self) -> tuple[np.ndarray | torch.Tensor, np.ndarray | torch.Tensor]:
        return self.x, self.y


class LoaderData:
    """A user's data loader (a torch ``DataLoader`` or any re-iterable of batches): each
    pass iterates it once, in its own order. ``to_xy`` turns one batch into (inputs,
    labels); the default takes an (x, y) pair (``TensorDataset``, torchvision); Flower
    Datasets' dict batches need e.g. ``to_xy=lambda b: (b["img"], b["label"])``. Batches
    move to ``device``. ``num_examples`` defaults to ``len(loader.dataset)``."""

    def __init__(
        self,
        loader: Iterable[Any],
        *,
        to_xy: Callable[[Any], Batch] | None = None,
        device: torch.device | str | None = None,
        num_examples: int | None = None,
    ) -> None:
        self.loader, self.to_xy, self.device = loader, to_xy or pair_batch, device
        dataset = getattr(loader, "dataset", None)
        if num_examples is None and not hasattr(dataset, "__len__"):
            raise ValueError(
                "num_examples: the data loader has no sized .dataset to count its "
                "examples (num-examples): pass num_examples=..."
            )
        self.num_examples = len(dataset) if num_examples is None else num_examples

    def __len__(self) -> int:
        return self.num_examples

    def passes(self, config: Mapping[str, Any]) -> OnePass:
        if BATCH_SIZE in config:
            raise ValueError(
                f"the server sent '{BATCH_SIZE}' = {config[BATCH_SIZE]}, but a data loader "
                "fixes its own batch size: build the loader with that batch size and take "
                f"'{BATCH_SIZE}' out of the strategy's train config"
            )

        def one_pass() -> Iterable[Batch]:
            for batch in self.loader:
                x, y = self.to_xy(batch)
                yield x.to(self.device), y.to(self.device)

        return one_pass

    def full(self) -> tuple[torch.Tensor, torch.Tensor]:
        xs, ys = zip(*self.passes({})())
        return torch.cat(xs), torch.cat(ys)


def pair_batch(batch: Any) -> Batch:
    """The default ``to_xy``: a batch that is an (inputs, labels) pair."""
    if isinstance(batch, Mapping):
        raise ValueError(
            f"to_xy: the data loader yields dict batches (keys {sorted(batch)}): pass "
            "to_xy=... naming its inputs and labels, e.g. to_xy=lambda b: (b['img'], "
            "b['label'])"
        )
    if not isinstance(batch, Sequence) or len(batch) != 2:
        raise ValueError(
            f"to_xy: a batch of type {type(batch).__name__} is not an (inputs, labels) "
            "pair: pass to_xy=... that returns (inputs, labels) tensors"
        )
    return batch[0], batch[1]
