"""A folder of run directories, read once: each run's status, scenario, summary, metrics
rows and variant (``weights.npy`` and ``plot_inputs.npz`` when first asked), as plain
values that every table and figure of the report takes; none of them reads the disk.
A ``complete`` run whose files are missing, garbled or truncated reads as
``damaged: <why>``, a dead run's ``running`` as ``interrupted``: both are incomplete."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

import numpy as np

from fedram_flwr.rundir.outputs import RunDirectory

DAMAGED = "damaged: "
"""How a complete run whose files are not whole reads (``damaged: <what>``)."""
# Stats that older summaries lack: their tables are left out rather than flagged.
OPTIONAL_STATS = ("time-mean",)


@dataclass(frozen=True)
class Run:
    """One run directory's files. ``label``: its variant as the report prints it (the
    folder under the root, ``default`` at the root itself); ``fields``: the variant's
    swept ``{key: value}`` (``variant.json``; parsed from the label in older folders)."""

    path: Path
    label: str
    status: str
    fields: dict[str, str] = field(default_factory=dict)
    scenario: dict[str, Any] = field(default_factory=dict)
    summary: dict[str, Any] = field(default_factory=dict)
    rows: list[dict[str, Any]] = field(default_factory=list)

    @property
    def complete(self) -> bool:
        return self.status == "complete"

    @property
    def warnings(self) -> list[str]:
        """The summary's warnings (e.g. no client trained in any round)."""
        return list(self.summary.get("warnings", []))

    @property
    def seed(self) -> Any:
        return self.scenario.get("seed")

    @cached_property
    def weights(self) -> np.ndarray | None:
        """Rounds x clients aggregation weights, read on first use."""
        return RunDirectory(self.path).read_weights()

    @cached_property
    def plot_inputs(self) -> dict[str, np.ndarray]:
        """``plot_inputs.npz`` ({} when the run has none), read on first use."""
        return RunDirectory(self.path).read_plot_inputs() or {}

    @classmethod
    def read(cls, path: Path, label: str) -> Run:
        d = RunDirectory(path)
        status = d.status()
        try:
            record = d.read_variant()
            fields = dict(record["fields"]) if record else parse_label(label)
        except (ValueError, KeyError, TypeError):  # a garbled variant.json
            fields = parse_label(label)
        if status == "complete" and (why := d.damage()) is not None:
            status = f"{DAMAGED}{why}"
        if status != "complete":
            return cls(path, label, status, fields)
        return cls(path, label, status, fields, d.scenario(), d.read_summary(), d.read_metrics())


@dataclass(frozen=True)
class RunSet:
    """Every run directory under ``root`` (folders holding ``status.json``, sorted)."""

    root: Path
    runs: list[Run]

    @classmethod
    def load(cls, root: str | Path) -> RunSet:
        root = Path(root)
        runs = []
        for status in sorted(root.rglob("status.json")):
            rel = status.parent.relative_to(root)
            label = str(rel.parent) if len(rel.parts) > 1 else "default"
            runs.append(Run.read(status.parent, label))
        return cls(root, runs)

    @property
    def complete(self) -> list[Run]:
        return [r for r in self.runs if r.complete]

    def finals(self, stat: str = "final") -> dict[str, list[dict[str, Any]]]:
        """``stat`` metrics (``final``, ``tail-mean`` or ``time-mean``) of the complete
        runs per variant, each with the run's ``seed`` and ``rare-classes``."""
        out: dict[str, list[dict[str, Any]]] = defaultdict(list)
        for run in self.complete:
            if stat in run.summary:
                out[run.label].append(
                    {
                        **run.summary[stat],
                        "seed": run.seed,
                        "rare-classes": run.summary.get("rare-classes", []),
                    }
                )
        return dict(out)

    def damaged(self) -> list[tuple[str, str]]:
        """(path, what is wrong) of the runs recorded complete whose files are not whole
        (listed apart from the runs that did not complete; a rerun runs them again)."""
        return [
            (str(run.path), run.status.removeprefix(DAMAGED))
            for run in self.runs
            if run.status.startswith(DAMAGED)
        ]

    def incomplete(self, stat: str = "final") -> list[tuple[str, str]]:
        """(path, why) of the runs left out of ``stat``'s tables, the damaged ones
        (:meth:`damaged`) aside."""
        out = []
        for run in self.runs:
            if run.status.startswith(DAMAGED):
                continue
            if not run.complete:
                out.append((str(run.path), run.status))
            elif stat not in run.summary and stat not in OPTIONAL_STATS:
                out.append((str(run.path), f"summary has no '{stat}' (older format)"))
        return out

    def warnings(self, label: str) -> dict[str, int]:
        """{warning: number of seeds} over the complete runs of variant ``label``."""
        out: dict[str, int] = {}
        for run in self.complete:
            if run.label == label:
                for w in run.warnings:
                    out[w] = out.get(w, 0) + 1
        return out

    def by_seed(self) -> dict[str, dict[int, Run]]:
        """Complete runs per variant, keyed by seed."""
        out: dict[str, dict[int, Run]] = defaultdict(dict)
        for run in self.complete:
            out[run.label][int(run.scenario.get("seed", 0))] = run
        return dict(out)

    def fields(self, label: str) -> dict[str, str]:
        """The swept fields of variant ``label`` (its first run's)."""
        return next((r.fields for r in self.runs if r.label == label), parse_label(label))

    def split(
        self, label: str, key: str = "name", ignore: tuple[str, ...] = ()
    ) -> tuple[str, str | None]:
        """(the comparison group: the variant's other fields as ``k=v_k=v``, or ``all``;
        the value of ``key``, e.g. the algorithm). Fields in ``ignore`` (e.g. learning
        rates tuned per algorithm) do not separate groups."""
        fields = {k: v for k, v in self.fields(label).items() if k not in ignore}
        value = fields.pop(key, None)
        return "_".join(f"{k}={v}" for k, v in fields.items()) or "all", value


def parse_label(label: str) -> dict[str, str]:
    """Fields of a variant from its label, for run folders without ``variant.json``:
    ``p_min=0.1_name=fedar`` -> {"p_min": "0.1", "name": "fedar"}."""
    out: dict[str, str] = {}
    pending: list[str] = []  # pieces of a key holding "_" (p_min)
    for part in label.split("_"):
        if "=" in part:
            key, value = part.split("=", 1)
            out["_".join([*pending, key])] = value
            pending = []
        else:
            pending.append(part)
    if pending and out:  # a trailing value holding "_"
        last = next(reversed(out))
        out[last] += "_" + "_".join(pending)
    return out
