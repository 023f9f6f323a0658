"""``fedram run SCENARIO --ray``: a sweep's (variant, seed) runs as Ray tasks on a private
local cluster give the run folders of the same sweep run one by one: bit-identical final
models, the same metrics and summaries (timings aside), a report, and fingerprints that a
later sequential ``fedram run`` takes as complete. No process of the cluster outlives the
command. Marked ``flwr`` (it starts Ray), so it never starts beside another Ray start-up.
"""

from __future__ import annotations

import copy
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml

from fedram_flwr.cli.commands import main
from fedram_flwr.engines import fanout
from fedram_flwr.engines.fanout import fan_out
from fedram_flwr.engines.flwr.processes import free_port, process_table
from fedram_flwr.engines.flwr.ray_cluster import LocalCluster, local_cluster
from fedram_flwr.rundir.lock import lock_holder
from fedram_flwr.rundir.outputs import RunDirectory
from fedram_flwr.scenario.schema import ScenarioError
from tests.helpers import TINY_GAUSSIAN, final_arrays, token_processes, without_timings

LABELS = ["alpha=1.0", "alpha=0.1"]
SEEDS = [0, 1]


def recording_clusters(monkeypatch: pytest.MonkeyPatch) -> list[LocalCluster]:
    """The local clusters ``fan_out`` starts from now on, each appended once it is up."""
    started: list[LocalCluster] = []

    @contextmanager
    def recorded(*args: Any, **kwargs: Any) -> Iterator[LocalCluster]:
        with local_cluster(*args, **kwargs) as cluster:
            started.append(cluster)
            yield cluster

    monkeypatch.setattr(fanout, "local_cluster", recorded)
    return started


def cluster_processes(cluster: LocalCluster) -> dict[int, str]:
    """Live processes of this cluster: carrying its token, or naming its folder (not
    those of another cluster, e.g. another copy of the suite's, running meanwhile)."""
    folder = str(cluster.temp_dir.parent)
    return token_processes(cluster.token) | {
        p.pid: p.cmd for p in process_table().values() if p.state != "Z" and folder in p.cmd
    }


def test_an_unreachable_cluster_is_named_with_the_flag() -> None:
    address = f"127.0.0.1:{free_port()}"
    with pytest.raises(ScenarioError, match=f"--ray {address}: no Ray cluster answers"):
        fan_out(print, [("never",)], address)


@pytest.mark.flwr
@pytest.mark.breadth
def test_a_fanned_out_sweep_matches_the_sequential_one(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    raw = copy.deepcopy(TINY_GAUSSIAN)
    raw.update(seeds=SEEDS, sweep={"algorithm.alpha": [1.0, 0.1]})
    path = tmp_path / "tiny.yaml"
    path.write_text(yaml.safe_dump(raw, sort_keys=False))
    clusters = recording_clusters(monkeypatch)
    assert main(["run", str(path), "--out", str(tmp_path / "seq")]) == 0
    assert main(["run", str(path), "--out", str(tmp_path / "ray"), "--ray"]) == 0
    (cluster,) = clusters
    assert not cluster_processes(cluster), "processes of the local Ray survived the sweep"
    for label in LABELS:
        for seed in SEEDS:
            one, fanned = (
                RunDirectory(tmp_path / out / "tiny-gaussian" / label / f"seed{seed}")
                for out in ("seq", "ray")
            )
            assert one.status() == fanned.status() == "complete"
            # each fanned-out run was driven by a Ray worker, not by this process
            assert lock_holder(one.path)["pid"] == os.getpid()
            assert lock_holder(fanned.path)["pid"] not in (os.getpid(), None)
            for x, y in zip(final_arrays(one), final_arrays(fanned), strict=True):
                np.testing.assert_array_equal(x, y)
            assert without_timings(fanned.read_metrics()) == without_timings(one.read_metrics())
            assert without_timings(fanned.read_summary()) == without_timings(one.read_summary())
    assert (tmp_path / "ray" / "tiny-gaussian" / "report.md").is_file()
    capsys.readouterr()
    assert main(["run", str(path), "--out", str(tmp_path / "ray")]) == 0
    assert capsys.readouterr().err.count("complete, skipped") == len(LABELS) * len(SEEDS)
