"""Run directories: the files of one (scenario variant, seed) run, its one writer, and
whether what it holds can be trusted.

A run directory holds ``scenario.yaml`` (resolved, with the seed), ``status.json``
(``running`` until the last round is recorded, then ``complete``; ``failed`` with the
error when the engine saw one; with the writer's ``pid``), ``metrics.jsonl`` (one row per
round), ``summary.json``, ``fingerprint.json`` (:func:`scenario_fingerprint` of the
resolved scenario and the :func:`code_version` that ran it), ``run.lock`` (see below),
``availability.csv`` (the round x client 0/1 matrix of who was available in fact: the
oracle's draw minus clients whose instruction failed; replayable with the ``trace``
oracle), ``variant.json`` (the variant's label and swept fields, written by the
CLI), ``plot_inputs.npz`` (what one run's figures need beyond its metrics: the oracle's
hidden law and, for 2-D data, the decision-boundary grid), ``weights.npy`` for strategies
that weigh clients individually (rounds x clients float32: the aggregation weight q_k^(t)
each participant's update received, 0 for the others; one binary array instead of per-row
lists, so N = 100,000 clients cost 400 kB a round on disk and nothing in
``metrics.jsonl``), ``checkpoint.bin`` while an in-process run is under way (its state
every K rounds, :mod:`fedram_flwr.rundir.checkpoint`) and PNG plots (drawn by the CLI from
these files).

**One writer.** The process that drives a run holds an exclusive ``flock`` on
``run.lock`` for the run's life (:meth:`RunDirectory.lock`; re-entrant within a process,
released by the OS when the process dies however it dies) and records its pid and a
random token there; a second driver fails at once with :class:`RunDirectoryBusy`, naming
the folder and the holder's pid. Where another process writes the files (the ServerApp of
Flower's engines) it is given the token and checks, before every row and status it
writes, that a live driver still holds the lock with that token: a writer whose driver is
gone (an orphan) or was replaced can never mark the run complete. A ServerApp started
without a token (``flwr run .`` by hand) takes the lock itself.

**States.** :meth:`RunDirectory.status` reads ``interrupted`` for a ``starting`` or
``running`` run whose lock nobody holds (its driver died: SIGKILL, power loss), and
:meth:`RunDirectory.damage` names what is wrong with a ``complete`` run whose files are
missing, garbled or truncated; the CLI runs both again and the report lists them.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from fedram_flwr.rundir import integrity
from fedram_flwr.rundir.fingerprint import (
    code_version,
    dict_diff,
    plain_json,
    scenario_fingerprint,
)
from fedram_flwr.rundir.lock import acquire, held_token, lock_held, release, verify_writer
from fedram_flwr.rundir.nofollow import open_regular, read_regular, write_atomic
from fedram_flwr.scenario.schema import ScenarioError, plain_name
from fedram_flwr.scenario.sweep import label_part

WEIGHTS_FILE = "weights.npy"
VARIANT_FILE = "variant.json"
PLOT_INPUTS_FILE = "plot_inputs.npz"
FINGERPRINT_FILE = "fingerprint.json"
CHECKPOINT_FILE = "checkpoint.bin"
STALE_FILES = (
    "metrics.jsonl",
    "summary.json",
    "final_model.npz",
    "availability.csv",
    WEIGHTS_FILE,
    PLOT_INPUTS_FILE,
    FINGERPRINT_FILE,
    CHECKPOINT_FILE,
)
"""A previous attempt's results, removed when a run starts (not when it resumes)."""
ACTIVE = ("starting", "running")
"""Statuses of a run in progress; ``interrupted`` when nobody holds the lock."""


def label_fields(swept: Mapping[str, Any]) -> dict[str, str]:
    """The label's ``key=value`` parts of a variant's swept fields, as strings:
    ``{"availability.p_min": 0.1}`` -> ``{"p_min": "0.1"}``; a whole section given as a
    mapping with a ``name`` is named by it (``{"algorithm": {"name": "afl"}}`` ->
    ``{"name": "afl"}``), one without by its values (``{"time.policy": {"kind":
    "deadline", "deadline_s": 60}}`` -> ``{"policy": "deadline-60"}``), as
    ``Scenario.variants()`` labels it (:func:`~fedram_flwr.scenario.sweep.label_part`)."""
    return dict(label_part(key, value).split("=", 1) for key, value in swept.items())


def safe_component(value: str, what: str) -> str:
    """``value`` as one folder name under ``--out``: a plain name
    (:func:`~fedram_flwr.scenario.schema.plain_name`: ``name: ".."`` would write outside it)."""
    return plain_name(value, what)


PATH_MAX = 4096
"""The longest path Linux opens, in bytes."""
PATH_ROOM = 100
"""Room a run folder's path leaves for the files inside it (``flwr-logs/...``)."""


def run_folder(out: Path, name: str, label: str, seed: int) -> Path:
    """``<out>/<scenario name>/<variant label>/seed<k>``, each part checked, the whole
    within :data:`PATH_MAX` with :data:`PATH_ROOM` to spare."""
    folder = (
        out / safe_component(name, "name") / safe_component(label, "sweep: variant label")
    ) / f"seed{seed}"
    size = len(os.fsencode(folder.absolute()))
    if size > PATH_MAX - PATH_ROOM:
        raise ScenarioError(
            f"--out: run folder {str(folder)[:60]!r}... is a path of {size} bytes; a path "
            f"is at most {PATH_MAX} bytes, and a run folder leaves {PATH_ROOM} to its files"
        )
    return folder


def remove_stale(path: Path) -> None:
    """Remove what ``path`` names in a run folder, whatever it is: a file, a link (not
    what it points to) or a folder planted where a file goes (``checkpoint.bin/``)."""
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    else:
        path.unlink(missing_ok=True)


class RunDirectory:
    """Files of one (scenario variant, seed) run."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self._token = ""  # the driver's token, in a writer that does not hold the lock

    @property
    def metrics_path(self) -> Path:
        return self.path / "metrics.jsonl"

    @contextlib.contextmanager
    def lock(self) -> Iterator[str]:
        """Hold this folder's lock while inside (yields its token); raises
        :class:`RunDirectoryBusy` at once if another process holds it."""
        token = acquire(self.path)
        try:
            yield token
        finally:
            release(self.path)

    def held_token(self) -> str:
        """The lock's token when this process holds it, else ''."""
        return held_token(self.path)

    def status(self) -> str:
        """The recorded status; ``interrupted`` for a run in progress whose lock nobody
        holds; ``missing`` without a readable ``status.json``."""
        try:
            status = json.loads(read_regular(self.path / "status.json"))["status"]
        except (OSError, ValueError, KeyError, TypeError):  # a FIFO there too: never read
            return "missing"
        if status in ACTIVE and lock_held(self.path) is False:
            return "interrupted"
        return status

    def start(
        self, scenario: dict[str, Any], seed: int, engine: str, token: str = "", api: str = "legacy"
    ) -> None:
        """Begin the run: the writer's check (``token``: the driver's, when another
        process drives the run; without one this process takes the lock unless it holds
        it), stale results removed, the resolved scenario and its fingerprint written
        (with Flower's ``api`` that runs it, ``legacy`` or ``message``)."""
        if token:
            verify_writer(self.path, token)
            self._token = token
        elif not self.held_token():
            acquire(self.path)  # held until this process ends
        self.path.mkdir(parents=True, exist_ok=True)
        for stale in STALE_FILES:
            remove_stale(self.path / stale)
        if not os.path.isfile(status := self.path / "status.json") or status.is_symlink():
            remove_stale(status)  # a folder or a link there: nothing could replace it
        self.record_scenario(scenario, seed, api)
        self.set_status("running", engine=engine, started=time.time())

    def record_scenario(self, scenario: dict[str, Any], seed: int, api: str) -> None:
        """``scenario.yaml`` (the resolved scenario with its seed) and its fingerprint,
        written anew: when a run starts, and when it resumes (whatever became of them in
        between, a run that ends complete holds its own)."""
        self._check_writer()
        self.write("scenario.yaml", yaml.safe_dump({**scenario, "seed": seed}, sort_keys=False))
        fingerprint = {
            "scenario": scenario_fingerprint(scenario, seed),
            "code": code_version(),
            "api": api,
        }
        self.write(FINGERPRINT_FILE, json.dumps(fingerprint, indent=2))

    def set_status(self, status: str, **extra: Any) -> None:
        self._check_writer()
        record = {"status": status, "pid": os.getpid(), **extra}
        self.write("status.json", json.dumps(record, indent=2))

    def append_metrics(self, row: dict[str, Any]) -> None:
        self._check_writer()
        fd = open_regular(self.metrics_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT)
        with os.fdopen(fd, "w") as fh:
            fh.write(json.dumps(row) + "\n")

    def _check_writer(self) -> None:
        if self._token:
            verify_writer(self.path, self._token)

    def read_metrics(self) -> list[dict[str, Any]]:
        if not self.metrics_path.is_file():
            return []
        return [json.loads(line) for line in self.metrics_path.read_text().splitlines() if line]

    def read_weights(self) -> np.ndarray | None:
        """Rounds x clients aggregation weights (``weights.npy``), if the run has them."""
        f = self.path / WEIGHTS_FILE
        return np.load(f) if f.is_file() else None

    def read_final_model(self) -> list[np.ndarray] | None:
        """The global parameter arrays saved after the last round."""
        f = self.path / "final_model.npz"
        if not f.is_file():
            return None
        with np.load(f) as z:
            return [z[k] for k in sorted(z.files, key=lambda s: int(s.split("_")[1]))]

    def write_variant(self, label: str, swept: Mapping[str, Any]) -> None:
        """``variant.json``: the variant's label and swept ``{field: value}`` mapping, so
        a report groups runs by data rather than by parsing folder names."""
        self.path.mkdir(parents=True, exist_ok=True)
        record = {"label": label, "sweep": dict(swept), "fields": label_fields(swept)}
        self.write(VARIANT_FILE, json.dumps(record, indent=2))

    def read_variant(self) -> dict[str, Any] | None:
        """The record of :meth:`write_variant`; None in run folders made without it."""
        f = self.path / VARIANT_FILE
        return json.loads(f.read_text()) if f.is_file() else None

    def read_plot_inputs(self) -> dict[str, np.ndarray] | None:
        """The arrays of :func:`write_plot_inputs`; None when the run has none."""
        f = self.path / PLOT_INPUTS_FILE
        if not f.is_file():
            return None
        with np.load(f) as z:
            return {k: z[k] for k in z.files}

    def read_summary(self) -> dict[str, Any]:
        return json.loads((self.path / "summary.json").read_text())

    def scenario(self) -> dict[str, Any]:
        return yaml.safe_load((self.path / "scenario.yaml").read_text())

    def fingerprint(self) -> dict[str, Any]:
        """``fingerprint.json`` ({} in folders written before fingerprints)."""
        try:
            record = json.loads((self.path / FINGERPRINT_FILE).read_text())
        except (OSError, ValueError):
            return {}
        return record if isinstance(record, dict) else {}

    def api(self) -> str:
        """Flower's API the run was made with (``legacy`` in folders written before the
        fingerprint recorded it)."""
        return str(self.fingerprint().get("api", "legacy"))

    def damage(self) -> str | None:
        """What makes this (complete) run's results unusable, or None: a missing or
        garbled ``scenario.yaml`` / ``summary.json`` / ``metrics.jsonl`` /
        ``final_model.npz`` / ``weights.npy`` (:mod:`~fedram_flwr.rundir.integrity`), or
        metrics rows that are not rounds 0 .. the scenario's last, each once, in order,
        with an evaluation every ``eval_every`` rounds."""
        try:
            scenario = self.scenario()
            if not isinstance(scenario, dict) or "seed" not in scenario:
                return "scenario.yaml is garbled"
        except (OSError, yaml.YAMLError) as err:
            return f"scenario.yaml unreadable ({type(err).__name__})"
        try:
            summary = self.read_summary()
        except (OSError, ValueError) as err:
            return f"summary.json unreadable ({type(err).__name__})"
        if (why := integrity.summary_damage(summary)) is not None:
            return why
        try:
            rows = self.read_metrics()
        except (OSError, ValueError):
            return "metrics.jsonl is truncated or garbled"
        rounds, every = scenario.get("rounds"), scenario.get("eval_every")
        return (
            integrity.metrics_damage(rows, summary.get("rounds", rounds))
            or integrity.metrics_damage(rows, rounds, every=every, rounds=rounds)
            or integrity.final_model_damage(self.path / integrity.FINAL_MODEL_FILE)
            or integrity.weights_damage(self.path / WEIGHTS_FILE, summary.get("rounds", rounds))
        )

    def changes(self, scenario: Mapping[str, Any], seed: int) -> str | None:
        """How ``(scenario, seed)`` differs from what this run recorded (its changed
        fields), or None when it is the same: by fingerprint, or by ``scenario.yaml`` in a
        folder written before fingerprints."""
        if self.fingerprint().get("scenario") == scenario_fingerprint(scenario, seed):
            return None
        try:
            old = self.scenario()
        except (OSError, yaml.YAMLError):
            old = {}
        new = {**scenario, "seed": seed}
        diffs = [
            f"{key}: {a!r} -> {b!r}"
            for key, a, b in dict_diff(
                plain_json({k: v for k, v in (old or {}).items() if k != "seeds"}),
                plain_json({k: v for k, v in new.items() if k != "seeds"}),
            )
        ]
        if not diffs:
            return None
        return ", ".join(diffs[:6]) + (f" (+{len(diffs) - 6} more)" if len(diffs) > 6 else "")

    def write(self, name: str, text: str) -> None:
        """``name`` in the run folder holds ``text``: atomic (never a half-written file),
        never written through a link (:func:`~.nofollow.write_atomic`)."""
        write_atomic(self.path / name, text.encode())
