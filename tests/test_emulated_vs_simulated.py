"""scripts/emulated_vs_simulated.py: the round-by-round comparison of a run on the
simulated clock with one on emulated real processes, on hand-made rows."""

from __future__ import annotations

import importlib.util

import pytest

from fedram_flwr.registry.app_config import APP_ROOT

SCRIPT = APP_ROOT / "scripts" / "emulated_vs_simulated.py"
spec = importlib.util.spec_from_file_location("emulated_vs_simulated", SCRIPT)
script = importlib.util.module_from_spec(spec)
spec.loader.exec_module(script)

MODELLED = {0: 12.0, 1: 3.5, 2: 5.5}
SIMULATED = [
    {"round": 0, "accuracy": 0.3},
    {"round": 1, "active": [0, 1, 2], "not-used": [0, 2], "sim-round-seconds": 5.0,
     "sim-seconds": 5.0, "round-seconds": 0.01, "accuracy": 0.6},
    {"round": 2, "active": [1], "not-used": [], "sim-round-seconds": 3.5,
     "sim-seconds": 8.5, "round-seconds": 0.01, "accuracy": 0.7},
]  # fmt: skip
EMULATED = [
    {"round": 0, "accuracy": 0.3},
    {"round": 1, "active": [0, 1, 2], "not-used": [2, 0], "round-seconds": 15.0,
     "fit-modelled-seconds": 7.0, "fit-slept-seconds": 6.25, "accuracy": 0.6},
    {"round": 2, "active": [1], "not-used": [1], "round-seconds": 9.0,
     "wall-round-seconds": 6.0, "accuracy": 0.65},
]  # fmt: skip


def test_rounds_are_compared_client_by_client_and_second_by_second() -> None:
    result = script.compare(SIMULATED, EMULATED, MODELLED)
    first, second = result["rounds"]
    assert first["late"] == {"simulated": [0, 2], "emulated": [0, 2]} and first["agree"]
    assert (first["slowest-modelled-seconds"], first["overhead-seconds"]) == (12.0, 3.0)
    assert first["spent-seconds"] == 0.75
    assert second["late"] == {"simulated": [], "emulated": [1]} and not second["agree"]
    # a wall-clock policy's own wait, not the recorder's seconds since the last row
    assert (second["slowest-modelled-seconds"], second["overhead-seconds"]) == (3.5, 2.5)
    assert result["accuracy"] == {
        "simulated": [(0.0, 0.3), (5.0, 0.6), (8.5, 0.7)],
        "emulated": [(0.0, 0.3), (15.0, 0.6), (21.0, 0.65)],
    }
    assert result["summary"] == {
        "rounds": 2,
        "late-agree": 1,
        "mean-overhead-seconds": 2.75,
        "sim-seconds": 8.5,
        "wall-seconds": 21.0,
    }
    text = script.markdown(result)
    assert "agree in 1 of 2 rounds" in text
    assert "| 2 | [] | [1] | 3.50 | 3.50 | 6.00 | 0.00 |" in text


def test_a_scenario_with_a_sweep_is_refused_before_any_run(tmp_path) -> None:
    scenario = APP_ROOT / "scenarios" / "time_results_fashion_mnist.yaml"
    with pytest.raises(SystemExit, match="has a sweep; pick one variant with --set"):
        script.main([str(scenario), "--out", str(tmp_path / "out")])
    assert not (tmp_path / "out").exists()
