"""scripts/fedawe_table2_tuned.py, FedAWE Table 2 with the paper's tuning protocol: its
plan (36 grid runs per algorithm and tuning seed), its option errors, the selection on a
grid of run folders written by hand, and the final scenario at the chosen pairs."""

from __future__ import annotations

import importlib.util
import re
import sys
from collections import Counter
from pathlib import Path

import pytest

from fedram_flwr.scenario.config import parse_scenario
from tests.helpers import write_run

SCRIPT = Path(__file__).resolve().parent.parent / "scripts" / "fedawe_table2_tuned.py"
spec = importlib.util.spec_from_file_location("fedawe_table2_tuned", SCRIPT)
tuned = importlib.util.module_from_spec(spec)
sys.modules[spec.name] = tuned
spec.loader.exec_module(tuned)

LABEL = re.compile(r"name=(.+)_lr=(.+)_server_lr=(.+)")
EIGHT = ["fedawe", "fedavg", "fedavg-all", "fedau", "f3ast", "fedavg-is", "mifa", "fedvarp"]


def plan_lines(capsys: pytest.CaptureFixture, *argv: str) -> list[str]:
    assert tuned.main(["--dry-run", *argv]) == 0
    return capsys.readouterr().out.splitlines()


def test_the_plan_is_the_papers_grid_36_runs_per_algorithm(capsys) -> None:
    lines = plan_lines(capsys)
    runs = [LABEL.fullmatch(line.split()[0]).groups() for line in lines if line.startswith("  ")]
    assert Counter(name for name, _, _ in runs) == {name: 36 for name in EIGHT}
    for name in EIGHT:  # every eta_0 x eta_g once per algorithm
        pairs = sorted((float(lr), float(g)) for n, lr, g in runs if n == name)
        assert pairs == sorted((lr, g) for lr in tuned.LRS for g in tuned.SERVER_LRS)
    assert lines[0] == "grid: fedawe_table2_tuned_grid, 500 rounds, dynamics stationary"
    assert all(line.endswith("seed=100") for line in lines if line.startswith("  "))
    assert lines[-1].endswith(
        "8 algorithms at their chosen pair x 4 dynamics x seeds [0, 1, 2] = 96 runs"
    )
    assert "2000 rounds" in lines[-1]


def test_the_plan_scales_down_only_as_told(capsys) -> None:
    lines = plan_lines(
        capsys, "--algorithms", "fedawe,mifa", "--lrs", "0.1,0.01", "--server-lrs", "1",
        "--tune-seeds", "7", "8", "--tune-rounds", "50", "--rounds", "100",
    )  # fmt: skip
    runs = [line for line in lines if line.startswith("  ")]
    assert len(runs) == 2 * 2 * 1 * 2  # algorithms x eta_0 x eta_g x tuning seeds
    assert "50 rounds" in lines[0] and "2 algorithms" in lines[-1] and "= 24 runs" in lines[-1]


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--algorithms", "fedawe,fedprox"], "--algorithms: fedprox not allowed; allowed values: "),
        (["--lrs", "0.1,fast"], "expected numbers joined by commas"),
        (["--server-lrs", "0,1"], "expected positive numbers"),
        (["--tune-rounds", "0"], "expected a whole number of at least 1"),
        (["--device", "tpu"], "invalid choice: 'tpu'"),
        (["--select", "loss"], "invalid choice: 'loss'"),
        (["--tune-dynamics", "cyclic"], "invalid choice: 'cyclic'"),
    ],
)
def test_option_errors_name_the_field_and_the_allowed_values(capsys, argv, message) -> None:
    try:
        code = tuned.main(["--dry-run", *argv])
    except SystemExit as exit_:  # argparse's own errors
        code = exit_.code
    err = capsys.readouterr().err
    assert code == 2 and message in err
    if argv[0] == "--algorithms":
        assert err.rstrip().endswith(", ".join(EIGHT))


def grid_folder(root: Path, accuracy: dict, incomplete=()) -> None:
    """The grid's run folders (seed 100), test accuracy ``accuracy[(name, lr, g)]``."""
    for (name, lr, g), acc in accuracy.items():
        label = f"name={name}_lr={lr}_server_lr={g}"
        variant = {"algorithm": {"name": name}, "training.lr": lr, "algorithm.server_lr": g}
        status = "running" if (name, lr, g) in incomplete else "complete"
        write_run(
            root, label, 100, [{"round": 500, "accuracy": acc}], status=status, variant=variant
        )


GRID = {  # two algorithms on a 2 x 2 grid
    ("fedawe", 0.1, 1.0): 0.70,
    ("fedawe", 0.1, 0.5): 0.74,  # chosen
    ("fedawe", 0.01, 1.0): 0.72,
    ("fedawe", 0.01, 0.5): 0.60,
    ("mifa", 0.1, 1.0): 0.50,
    ("mifa", 0.1, 0.5): 0.55,
    ("mifa", 0.01, 1.0): 0.80,  # chosen
    ("mifa", 0.01, 0.5): 0.79,
}


def small_grid() -> dict:
    argv = ["--algorithms", "fedawe,mifa", "--lrs", "0.1,0.01", "--server-lrs", "1,0.5"]
    return tuned.scenarios(tuned.parser().parse_args(argv))[0]


def test_selection_picks_each_algorithms_best_pair(tmp_path: Path) -> None:
    grid_folder(tmp_path, GRID)
    grid_folder(tmp_path, {("fedawe", 0.1, 5.0): 0.99})  # outside the grid asked for
    chosen = tuned.select(tmp_path, small_grid(), "accuracy")
    assert chosen == {"fedawe": ("0.1", "0.5"), "mifa": ("0.01", "1.0")}


def test_selection_waits_for_the_whole_grid(tmp_path: Path) -> None:
    grid_folder(tmp_path, GRID, incomplete=[("mifa", 0.01, 1.0)])
    with pytest.raises(SystemExit, match="not complete .*mifa 3 of 4 runs"):
        tuned.select(tmp_path, small_grid(), "accuracy")


def test_the_final_runs_are_each_algorithm_at_its_pair_under_four_dynamics() -> None:
    args = tuned.parser().parse_args(["--algorithms", "fedau,fedavg-is", "--device", "cuda"])
    grid, final = tuned.scenarios(args)
    final = tuned.with_choices(final, {"fedau": ("0.05", "1.5"), "fedavg-is": ("0.1", "50.0")})
    variants = parse_scenario(final).variants()
    assert len(variants) == 8
    for label, variant in variants:
        algorithm = variant.to_dict()["algorithm"]
        expected = (0.05, 1.5) if algorithm["name"] == "fedau" else (0.1, 50.0)
        assert (variant.training.lr, algorithm["params"]["server_lr"]) == expected
        assert variant.training.device == "cuda" and variant.rounds == 2000
    params = {
        v.to_dict()["algorithm"]["name"]: v.to_dict()["algorithm"]["params"] for _, v in variants
    }
    assert params["fedau"]["cutoff"] == 50 and params["fedavg-is"]["availability"] == "oracle"
    assert grid["client_metrics"] is False  # selecting on test accuracy needs no train metrics
    assert final["client_metrics"] is True  # Table 2's Train column


def test_batched_reaches_the_runs_training_section_and_off_leaves_it_out() -> None:
    grid, final = tuned.scenarios(tuned.parser().parse_args(["--batched", "on"]))
    assert grid["training"]["batched"] == final["training"]["batched"] == "on"
    grid, final = tuned.scenarios(tuned.parser().parse_args([]))
    assert "batched" not in grid["training"] and "batched" not in final["training"]
