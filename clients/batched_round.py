"""A round's client calls run together, their local SGD stacked (``training.batched``).

:class:`BatchedRound` runs a round's client calls (a legacy ``fit``, a ClientApp's
message) each in a worker thread of its own, strictly one at a time and in the given
order: a call runs until its local SGD starts
(:func:`~fedram_flwr.clients.training.sgd_passes` asks :func:`joined_round`), where it
leaves its job and waits; once every call waits or has returned, the jobs run stacked
(:func:`~fedram_flwr.clients.batched.stacked_sgd`, one stack per model), and each call
resumes in turn with its trained parameters in its model, to its end (or to its next
local SGD). Everything a client does besides SGD (its objective's state, hooks, reply)
is the per-client code, unchanged; the clients' models may be one shared object, as a
call's parameters are copied when it waits and written back when it resumes.

A call alone with its model in a round trains in the per-client loop (nothing to stack:
its result bit for bit). Each call hands the turn to the next itself (one thread switch
per call): one call runs at any time, so the threads add no concurrency, and the same
per-client inputs give the same per-client results, whatever the order. A client's
``train-seconds`` is the time from its SGD's call to its resumption: the round's stacked
computation and the other calls' turns in between.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal
from weakref import WeakKeyDictionary

import torch
from torch import nn

from fedram_flwr.clients.batched import JobResult, SGDJob, stacked_sgd, unbatchable
from fedram_flwr.clients.batches import OnePass
from fedram_flwr.clients.models import parameter_list

_worker = threading.local()


def joined_round() -> BatchedRound | None:
    """The batched round the calling thread's client runs in, or None (the per-client
    loop)."""
    return getattr(_worker, "round", None)


LOOP = object()
"""The result of a job that runs in the per-client loop after all."""


class RoundClosed(BaseException):
    """Raised in a waiting call when its round is closed before it could resume."""


@dataclass
class Outcome:
    """What a call gave: its value, or the exception it raised."""

    value: Any = None
    error: BaseException | None = None

    def get(self) -> Any:
        """The value, or raise the call's exception."""
        if self.error is not None:
            raise self.error
        return self.value


class Worker:
    """One thread that runs the calls given to it, handing control back to the round
    whenever a call waits for its stacked SGD or returns."""

    def __init__(self, owner: BatchedRound) -> None:
        self.owner = owner
        self.go = threading.Semaphore(0)
        self.call: Callable[[], Any] | None = None
        self.outcome: Outcome | None = None
        self.job: tuple[nn.Module, SGDJob] | None = None
        self.result: JobResult | BaseException | None = None
        self.thread = threading.Thread(target=self.serve, daemon=True, name="batched-client")
        self.thread.start()

    def serve(self) -> None:
        _worker.round, _worker.me = self.owner, self
        while True:
            self.go.acquire()
            call = self.call
            if call is None:  # the round is closed
                return
            if torch.get_num_threads() != self.owner.threads:  # per thread (OpenMP's)
                torch.set_num_threads(self.owner.threads)
            try:
                self.outcome = Outcome(value=call())
            except RoundClosed:
                return
            except BaseException as err:  # noqa: BLE001 - handed to the caller
                self.outcome = Outcome(error=err)
            self.call = None
            self.owner.pass_on()

    def wait_for(self, model: nn.Module, job: SGDJob) -> Any:
        """Leave ``job`` to the round and wait for its result (in this worker's thread)."""
        self.job, self.result = (model, job), None
        self.owner.pass_on()
        self.go.acquire()
        result, self.result = self.result, None
        if result is None:
            raise RoundClosed()
        if isinstance(result, BaseException):
            raise result
        return result


class BatchedRound:
    """Runs rounds of client calls together (see the module docstring); close it (or
    use it as a context manager) to end its worker threads.

    ``mode``: ``on`` refuses, naming why, a client whose local SGD cannot run stacked (a
    model with dropout or batch norm, an app's own optimizer); ``auto`` runs such a
    client's SGD with the per-client loop, in its turn."""

    def __init__(self, mode: Literal["on", "auto"] = "on") -> None:
        if mode not in ("on", "auto"):
            raise ValueError(f"training.batched: a batched round is 'on' or 'auto', got {mode!r}")
        self.mode = mode
        self.back = threading.Semaphore(0)
        self.workers: list[Worker] = []
        self.queue: list[Worker] = []  # the workers of a relay, in turn
        self.turn = 0
        self.threads = torch.get_num_threads()
        self._why: WeakKeyDictionary[nn.Module, str | None] = WeakKeyDictionary()

    def __enter__(self) -> BatchedRound:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """End every worker thread (a call still waiting raises :class:`RoundClosed`)."""
        for w in self.workers:
            w.call, w.result = None, None
            w.go.release()
        for w in self.workers:
            w.thread.join()
        self.workers = []

    def run(self, calls: Sequence[Callable[[], Any]]) -> list[Outcome]:
        """Run ``calls`` together; their outcomes in call order. The calls' torch uses
        the caller's number of intra-op threads."""
        self.threads = torch.get_num_threads()
        while len(self.workers) < len(calls):
            self.workers.append(Worker(self))
        workers = self.workers[: len(calls)]
        for w, call in zip(workers, calls):
            w.call, w.outcome, w.job = call, None, None
        self.relay(workers)
        while waiting := [w for w in workers if w.job is not None]:
            results = self.stacked([w.job for w in waiting])
            for w, result in zip(waiting, results):
                w.job, w.result = None, result
            self.relay(waiting)
        return [w.outcome or Outcome(error=RuntimeError("a call did not return")) for w in workers]

    def relay(self, workers: Sequence[Worker]) -> None:
        """Let each of ``workers`` in turn run until it waits again or its call returns;
        each hands the turn to the next itself (:meth:`pass_on`), the last one back here:
        one thread switch per call, not two."""
        if workers:
            self.queue, self.turn = list(workers), 0
            workers[0].go.release()
            self.back.acquire()

    def pass_on(self) -> None:
        """End the running worker's turn (called in its thread): the next one's, or
        back to the round."""
        self.turn += 1
        if self.turn < len(self.queue):
            self.queue[self.turn].go.release()
        else:
            self.back.release()

    def stacked(self, jobs: Sequence[tuple[nn.Module, SGDJob]]) -> list[Any]:
        """Each waiting job's result (or exception): one stacked run per model object
        (:data:`LOOP` for a job alone with its model: the per-client loop runs it)."""
        out: list[Any] = [RuntimeError("not run")] * len(jobs)
        groups: dict[int, list[int]] = {}
        for i, (model, _) in enumerate(jobs):
            groups.setdefault(id(model), []).append(i)
        for members in groups.values():
            if len(members) == 1:  # alone: the per-client loop, bit for bit (LOOP)
                out[members[0]] = LOOP
                continue
            model = jobs[members[0]][0]
            try:
                results: list[Any] = stacked_sgd(model, [jobs[i][1] for i in members])
            except Exception as err:  # noqa: BLE001 - every member of the stack fails
                results = [err] * len(members)
            for i, result in zip(members, results):
                out[i] = result
        return out

    def refusal(self, model: nn.Module, optimizer: object | None) -> str | None:
        """Why ``model``'s SGD (with ``optimizer``) cannot run stacked, or None."""
        if optimizer is not None:
            return "the client trains with its own optimizer (only plain SGD runs stacked)"
        if model not in self._why:
            self._why[model] = unbatchable(model)
        return self._why[model]

    def sgd_passes(
        self, model: nn.Module, one_pass: OnePass, optimizer: object | None, **settings: Any
    ) -> tuple[list[float], int, int] | None:
        """The calling client's ``sgd_passes`` through the stack: (every step's loss, the
        last pass's number of steps, K), the trained parameters in ``model`` (and the last
        step's gradients in their ``grad``, as the per-client loop leaves them); or None for
        the per-client loop: when ``auto`` leaves this client to it, or when the client
        trains alone in its round (nothing to stack: the loop's own result, bit for bit)."""
        why = self.refusal(model, optimizer)
        if why is not None:
            if self.mode == "auto":
                return None
            raise ValueError(f"training.batched: on, but this client cannot train stacked: {why}")
        params = parameter_list(model)
        job = SGDJob([p.detach().clone() for p in params], one_pass, **settings)
        result = _worker.me.wait_for(model, job)
        if result is LOOP:  # the model as this client left it, for the per-client loop
            with torch.no_grad():
                for p, start in zip(params, job.start):
                    p.copy_(start)
            return None
        with torch.no_grad():
            for p, trained, grad in zip(params, result.params, result.grads):
                p.copy_(trained)
                p.grad = grad
        return result.losses, job.pass_lengths[-1], result.steps
