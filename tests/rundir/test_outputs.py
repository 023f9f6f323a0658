"""Run directories (fedram_flwr/rundir/outputs.py): per-round aggregation weights in
``weights.npy``, estimator errors logged by the recorder from the oracle's hidden law,
the summary's time-averaged accuracy, and the variant record ``variant.json``."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from fedram_flwr.rundir.outputs import (
    RunDirectory,
    availability_from_rows,
    label_fields,
    realised_availability,
    summarise,
)
from fedram_flwr.strategies.ca_fed import (
    lambda_hat,
    pi_hat,
    transition_counts,
    transition_matrix_hat,
)
from tests.helpers import CA_FED_PI


def test_weights_are_recorded_per_round_for_the_participants(ca_fed_run) -> None:
    _, out = ca_fed_run
    weights = out.read_weights()
    assert weights is not None and weights.shape == (4, 6) and weights.dtype == np.float32
    rows = out.read_metrics()
    relayed = availability_from_rows(rows, 6, "relayed")
    assert not np.any(weights[~relayed])  # only clients whose update was aggregated
    participants = {r["round"]: r["fit-participants"] for r in rows if "fit-participants" in r}
    for t, n in participants.items():
        assert np.count_nonzero(weights[t - 1]) == n
    # rows stay compact: no per-client weight lists in metrics.jsonl
    assert not any(
        isinstance(v, list) and k not in ("active", "relayed", "failed")
        for r in rows
        for k, v in r.items()
    )


def test_estimator_errors_match_the_tracker_on_the_recorded_matrix(ca_fed_run) -> None:
    _, out = ca_fed_run
    rows = out.read_metrics()
    active = availability_from_rows(rows, 6, "relayed")
    pi = np.array(CA_FED_PI)
    lam = np.array(out.scenario()["availability"]["params"]["lam"])
    for r in rows:
        if r["round"] == 0:
            continue
        t = r["round"]
        seen = active[:t]
        pi_est = pi_hat(seen.sum(0), t, 1.0, 1.0)
        lam_est = lambda_hat(transition_matrix_hat(transition_counts(seen), 1.0))
        assert r["pi-error"] == pytest.approx(np.abs(pi_est - pi).mean())
        assert r["lambda-error"] == pytest.approx(np.abs(lam_est - lam).mean())


def test_time_mean_averages_every_evaluation_after_round_zero() -> None:
    rows = [{"round": r, "accuracy": a} for r, a in [(0, 0.0), (5, 0.2), (10, 0.4), (15, 0.9)]]
    s = summarise(rows)
    assert s["time-mean"]["accuracy"] == pytest.approx(0.5)
    assert s["final"]["accuracy"] == 0.9


def test_label_fields_name_whole_sections_by_their_name() -> None:
    swept = {"algorithm": {"name": "afl", "params": {"lr_lambda": 0.1}}, "data.num_clients": 80}
    assert label_fields(swept) == {"name": "afl", "num_clients": "80"}
    assert label_fields({"algorithm.alpha": 1.0}) == {"alpha": "1.0"}
    policy = {"time.policy": {"kind": "deadline", "deadline_s": 60.0, "late": "keep"}}
    assert label_fields(policy) == {"policy": "deadline-60.0-keep"}  # as the folder's label


def test_variant_record_survives_a_restart_of_the_run(tmp_path: Path) -> None:
    run = RunDirectory(tmp_path / "x")
    assert run.read_variant() is None
    run.write_variant("p_min=0.1", {"availability.p_min": 0.1})
    run.start({"name": "x"}, 0, engine="in-process")  # clears stale results, not the record
    assert run.read_variant() == {
        "label": "p_min=0.1",
        "sweep": {"availability.p_min": 0.1},
        "fields": {"p_min": "0.1"},
    }


def test_a_run_nobody_trained_warns_in_its_summary() -> None:
    # rounds whose fit Flower cancelled (nobody available) have no "relayed" list
    empty = [{"round": r, "accuracy": 0.3} for r in range(3)]
    assert summarise(empty)["warnings"] == ["no client trained in any round"]
    assert "warnings" not in summarise([*empty, {"round": 3, "relayed": [1], "accuracy": 0.5}])


def test_availability_csv_leaves_out_the_clients_whose_instruction_failed() -> None:
    """availability.csv is who was available in fact: drawn, and not failed (a SuperNode
    gone); the trace oracle replaying it then draws exactly the run's participants."""
    rows = [
        {"round": 0},
        {"round": 1, "active": [0, 1, 2], "relayed": [0, 1, 2], "failed": []},
        {"round": 2, "active": [0, 1, 2], "relayed": [0, 1], "failed": [2]},
        {"round": 3, "active": [1], "relayed": [], "failed": [1]},
        {"round": 4, "active": [0, 1], "relayed": [0]},  # no "failed": a row of old runs
    ]
    expected = np.array([[1, 1, 1], [1, 1, 0], [0, 0, 0], [1, 1, 0]], dtype=bool)
    assert np.array_equal(realised_availability(rows, 3), expected)
