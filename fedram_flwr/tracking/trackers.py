"""The three trackers a run logs to: TensorBoard (event files), MLflow (a tracking store)
and Weights & Biases (offline unless configured). Each module of a tracker is imported
when a run first opens it, never before (the ``tracking`` extra is optional).

A tracker sees one run at a time: :meth:`Tracker.open` (a new run, or the one whose id
the run folder kept, when the run resumes), :meth:`Tracker.log` per round, then
:meth:`Tracker.finish` (the summary's numbers and the run's files) and
:meth:`Tracker.close` with the run's end: ``complete``, ``failed`` or ``interrupted``.
"""

from __future__ import annotations

import os
import struct
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

TRACKERS = ("tensorboard", "mlflow", "wandb")
"""The trackers ``--track`` names."""
MODULES = {"tensorboard": "tensorboard", "mlflow": "mlflow", "wandb": "wandb"}
"""The module each tracker needs (the ``tracking`` extra installs them all)."""
EXTRA = "tracking"
INSTALL = f"pip install 'fedram-flwr[{EXTRA}]'"


@dataclass(frozen=True)
class RunInfo:
    """Who a tracked run is. ``name``: the run's label (``<variant>/seed<k>``); ``group``:
    the sweep it belongs to (the scenario's name: MLflow's experiment, W&B's group,
    TensorBoard's folder); ``params``: its parameters (strings); ``root``: the folder the
    local stores go under (``<out>/tracking``)."""

    name: str
    group: str
    params: dict[str, str]
    root: Path
    tags: dict[str, str] = field(default_factory=dict)


class Tracker:
    """One tracker's side of a run (module docstring)."""

    name = ""

    def open(self, run: RunInfo, resume_id: str | None) -> str:
        """Start (or, with ``resume_id``, continue) the tracked run; its id."""
        raise NotImplementedError

    def log(self, step: int, metrics: dict[str, float]) -> None:
        """One round's numbers at step ``step``."""
        raise NotImplementedError

    def finish(self, summary: dict[str, float], files: list[Path]) -> None:
        """The run's summary numbers and its files (``summary.json``, the PNGs)."""
        raise NotImplementedError

    def close(self, status: str) -> None:
        """End the tracked run: ``complete``, ``failed`` or ``interrupted``."""
        raise NotImplementedError


def png_size(data: bytes) -> tuple[int, int]:
    """(width, height) of a PNG's bytes, read from its header (IHDR)."""
    if data[:8] != b"\x89PNG\r\n\x1a\n":
        raise ValueError("not a PNG file")
    return struct.unpack(">II", data[16:24])


SIM_SECONDS = "sim-seconds"
"""The row's key of a run on a simulated clock: the seconds at the round's end."""
CLOCK_PREFIX = "vs-sim-seconds/"
"""TensorBoard's section of a run on a clock: each metric again, its step the simulated
second (rounded) at which the round ended."""


class TensorBoardTracker(Tracker):
    """Event files under ``<root>/tensorboard/<group>/<name>`` (a resumed run writes one
    more file there: TensorBoard reads a folder's files as one run), with TensorBoard's
    own writer; scalars per round and, on a clock, again under ``vs-sim-seconds/`` against
    the simulated seconds; the summary's numbers under ``summary/`` at the last step, the
    PNGs as images, the run's end as the text ``status``."""

    name = "tensorboard"

    def open(self, run: RunInfo, resume_id: str | None) -> str:
        from tensorboard.summary.writer.event_file_writer import EventFileWriter

        folder = run.root / "tensorboard" / run.group / run.name
        folder.mkdir(parents=True, exist_ok=True)
        self._writer = EventFileWriter(str(folder))
        self._step = 0
        if resume_id is None:
            self._text("params", "\n".join(f"{k}: {v}" for k, v in run.params.items()))
        return str(folder.relative_to(run.root))

    def _write(self, step: int, values: list[Any]) -> None:
        from tensorboard.compat.proto import event_pb2, summary_pb2

        summary = summary_pb2.Summary(value=values)
        self._writer.add_event(event_pb2.Event(wall_time=time.time(), step=step, summary=summary))

    def _text(self, tag: str, text: str) -> None:
        from tensorboard.compat.proto import summary_pb2, tensor_pb2, tensor_shape_pb2, types_pb2

        metadata = summary_pb2.SummaryMetadata(
            plugin_data=summary_pb2.SummaryMetadata.PluginData(plugin_name="text")
        )
        tensor = tensor_pb2.TensorProto(
            dtype=types_pb2.DT_STRING,
            string_val=[text.encode()],
            tensor_shape=tensor_shape_pb2.TensorShapeProto(),
        )
        value = summary_pb2.Summary.Value(tag=tag, metadata=metadata, tensor=tensor)
        self._write(self._step, [value])

    def log(self, step: int, metrics: dict[str, float]) -> None:
        from tensorboard.compat.proto import summary_pb2

        def values(prefix: str) -> list[Any]:
            return [
                summary_pb2.Summary.Value(tag=prefix + k, simple_value=v)
                for k, v in metrics.items()
            ]

        self._step = step
        self._write(step, values(""))
        clock = metrics.get(SIM_SECONDS)
        if clock is not None and clock == clock:  # on a clock: the same against its seconds
            self._write(round(clock), values(CLOCK_PREFIX))

    def finish(self, summary: dict[str, float], files: list[Path]) -> None:
        from tensorboard.compat.proto import summary_pb2

        self.log(self._step, {f"summary/{k}": v for k, v in summary.items()})
        images = []
        for path in files:
            if path.suffix == ".png":
                data = path.read_bytes()
                width, height = png_size(data)
                image = summary_pb2.Summary.Image(
                    height=height, width=width, colorspace=4, encoded_image_string=data
                )
                images.append(summary_pb2.Summary.Value(tag=f"plots/{path.stem}", image=image))
        if images:
            self._write(self._step, images)

    def close(self, status: str) -> None:
        self._text("status", status)
        self._writer.close()


MLFLOW_PARAM_CHARS = 6000
"""The longest parameter value MLflow stores (a longer one, e.g. a trace's matrix, is cut)."""
MLFLOW_STATUS = {"complete": "FINISHED", "failed": "FAILED", "interrupted": "KILLED"}


class MlflowTracker(Tracker):
    """A run in the MLflow experiment named by the group, in the store
    ``$MLFLOW_TRACKING_URI`` names, else a local SQLite store ``<root>/mlflow.db`` (its
    artifacts in ``<root>/mlartifacts/<group>``: MLflow 3 refuses new file stores); parameters,
    metrics per step, ``summary.json`` and the PNGs as artifacts; its end as the run's
    status (FINISHED, FAILED, KILLED)."""

    name = "mlflow"

    def open(self, run: RunInfo, resume_id: str | None) -> str:
        from mlflow.tracking import MlflowClient

        root = run.root.absolute()
        uri = os.environ.get("MLFLOW_TRACKING_URI") or f"sqlite:///{root / 'mlflow.db'}"
        if not os.environ.get("MLFLOW_TRACKING_URI"):
            root.mkdir(parents=True, exist_ok=True)
        self._client = client = MlflowClient(tracking_uri=uri)
        if resume_id is not None:
            self._run_id = resume_id
            client.update_run(resume_id, status="RUNNING")
            return resume_id
        experiment = client.get_experiment_by_name(run.group)
        experiment_id = (
            experiment.experiment_id
            if experiment
            else client.create_experiment(
                run.group, artifact_location=(root / "mlartifacts" / run.group).as_uri()
            )
        )
        created = client.create_run(experiment_id, run_name=run.name, tags=run.tags)
        self._run_id = created.info.run_id
        self._params(run.params)
        return self._run_id

    def _params(self, params: dict[str, str]) -> None:
        from mlflow.entities import Param

        items = [Param(k, v[:MLFLOW_PARAM_CHARS]) for k, v in params.items()]
        for i in range(0, len(items), 100):  # MLflow takes at most 100 params a batch
            self._client.log_batch(self._run_id, params=items[i : i + 100])

    def log(self, step: int, metrics: dict[str, float]) -> None:
        from mlflow.entities import Metric

        now = int(time.time() * 1000)
        items = [Metric(k, v, now, step) for k, v in metrics.items()]
        self._client.log_batch(self._run_id, metrics=items)

    def finish(self, summary: dict[str, float], files: list[Path]) -> None:
        for path in files:
            self._client.log_artifact(self._run_id, str(path))

    def close(self, status: str) -> None:
        self._client.set_terminated(self._run_id, status=MLFLOW_STATUS[status])


class WandbTracker(Tracker):
    """A W&B run in project ``$WANDB_PROJECT`` (default ``fedram``), grouped by the
    sweep, named by the run's label; offline (files under ``<root>/wandb``, for ``wandb
    sync``) unless ``$WANDB_MODE`` says otherwise. A resumed run continues its id; the
    summary's numbers go to the run's summary, the files are saved with it; a failed or
    interrupted run ends with a non-zero exit code (W&B shows it failed)."""

    name = "wandb"

    def open(self, run: RunInfo, resume_id: str | None) -> str:
        import wandb

        (run.root / "wandb").mkdir(parents=True, exist_ok=True)
        self._run = wandb.init(
            project=os.environ.get("WANDB_PROJECT", "fedram"),
            group=run.group,
            name=run.name,
            config=run.params,
            tags=list(run.tags.values()),
            dir=str(run.root),
            mode=os.environ.get("WANDB_MODE") or "offline",
            id=resume_id,
            resume="allow" if resume_id else None,
            reinit="create_new",
            settings=wandb.Settings(silent=os.environ.get("WANDB_SILENT", "true") == "true"),
        )
        self._run.define_metric("round")
        self._run.define_metric("*", step_metric="round")
        return self._run.id

    def log(self, step: int, metrics: dict[str, float]) -> None:
        self._run.log({"round": step, **metrics}, step=step)

    def finish(self, summary: dict[str, float], files: list[Path]) -> None:
        self._run.summary.update({f"summary/{k}": v for k, v in summary.items()})
        for path in files:
            self._run.save(str(path), base_path=str(path.parent), policy="now")

    def close(self, status: str) -> None:
        self._run.finish(exit_code=0 if status == "complete" else 1)


def tracker(name: str) -> Tracker:
    """A new tracker of that name (one of :data:`TRACKERS`)."""
    return {"tensorboard": TensorBoardTracker, "mlflow": MlflowTracker, "wandb": WandbTracker}[
        name
    ]()
