"""FedAWE Table 2 with the paper's tuning protocol (Xiang et al., NeurIPS 2024, App. J), as
one resumable command over ``fedram run`` and the report's rate-grid selection:

1. **Grid**: per algorithm, every eta_0 (``training.lr``) x eta_g (``algorithm.server_lr``)
   of App. J ({0.1, 0.05, 0.01, 0.005, 0.001, 0.0005} x {0.5, 1, 1.5, 5, 10, 50}: 36 runs
   per algorithm and tuning seed), ``--tune-rounds`` rounds (the paper's 500), on tuning
   seeds (``--tune-seeds``, 100) that the reported runs do not use, under one dynamics
   (``--tune-dynamics``, stationary: the paper does not say which; its Table 7 has one
   pair per algorithm and data set for all four dynamics).
2. **Selection** (:func:`fedram_flwr.report.rate_grid.chosen_rates`): per algorithm the pair
   with the best ``--select`` metric (default ``accuracy``, the test accuracy: the paper's
   "best performance after 500 global rounds" does not name the metric), the mean over
   the evaluations of the last 20% of the tuning rounds, averaged over tuning seeds.
3. **Final runs**: each algorithm at its pair under the four dynamics on ``--seeds``
   (0 1 2), ``--rounds`` rounds (the paper's 2000), then ``fedram report`` of both folders
   and ``OUT/fedawe_table2_tuned.md``: the options (every scale-down printed), the chosen
   pairs beside Table 7, our Table 2 and our rows beside the paper's with the ranking
   agreement (:mod:`fedram_flwr.report.fedawe_paper`).

Completed runs are skipped (``fedram run`` resumes a sweep), so it can run in pieces;
``--device cuda`` puts every run's model and data on the GPU. Usage::

    python scripts/fedawe_table2_tuned.py --dry-run            # the plan, nothing run
    python scripts/fedawe_table2_tuned.py --device cuda        # the whole protocol
"""

from __future__ import annotations

import argparse
import copy
import sys
from pathlib import Path
from typing import Any

import yaml

import fedram_flwr.cli.commands as cli
from fedram_flwr.report import write_report
from fedram_flwr.report.fedawe_paper import TABLE7, comparison_section
from fedram_flwr.report.last_rounds import ALGORITHMS, DYNAMICS, last_rounds_table
from fedram_flwr.report.rate_grid import CRITERIA, chosen_rates, rate_grid_section
from fedram_flwr.report.runs import RunSet
from fedram_flwr.scenario.config import ScenarioError, parse_scenario, read_scenario_file

ROOT = Path(__file__).resolve().parent.parent
BASE = ROOT / "scenarios" / "fedawe_table2_tuned.yaml"
LRS = (0.1, 0.05, 0.01, 0.005, 0.001, 0.0005)
SERVER_LRS = (0.5, 1.0, 1.5, 5.0, 10.0, 50.0)
"""App. J: "eta_0 and eta_g are searched, based on the best performance after 500 global
rounds, over two grids"."""


def rates(text: str) -> list[float]:
    """``0.1,0.05`` -> [0.1, 0.05]; an error names the option's expected form."""
    try:
        values = [float(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: expected numbers joined by commas") from None
    if not values or any(not v > 0 for v in values):
        raise argparse.ArgumentTypeError(f"{text!r}: expected positive numbers joined by commas")
    return values


def positive(text: str) -> int:
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: expected a whole number of at least 1")
    return int(text)


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", type=Path, default=Path("runs/fedawe_table2_tuned"))
    p.add_argument("--base", type=Path, default=BASE, help="the setting (default: %(default)s)")
    p.add_argument("--device", choices=("cpu", "cuda", "auto"), default="cpu")
    p.add_argument(
        "--batched",
        choices=("off", "on", "auto"),
        default="off",
        help="training.batched: a round's clients stacked (docs/performance.md)",
    )
    p.add_argument("--rounds", type=positive, help="final runs' rounds (default: the base's)")
    p.add_argument("--tune-rounds", type=positive, default=500)
    p.add_argument("--eval-every", type=positive, help="default: the base's")
    p.add_argument("--lrs", type=rates, default=list(LRS), help="eta_0 grid, e.g. 0.1,0.01")
    p.add_argument("--server-lrs", type=rates, default=list(SERVER_LRS), help="eta_g grid")
    p.add_argument("--algorithms", help="a subset, joined by commas (default: all eight)")
    p.add_argument("--model", help="model.name (default: the base's)")
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    p.add_argument("--tune-seeds", type=int, nargs="+", default=[100])
    p.add_argument("--tune-dynamics", default="stationary", choices=list(DYNAMICS))
    p.add_argument("--select", default="accuracy", choices=list(CRITERIA))
    p.add_argument("--stage", choices=("all", "tune"), default="all", help="tune: stop after it")
    p.add_argument("--ray", action="store_true", help="fedram run --ray (one run per core)")
    p.add_argument("--dry-run", action="store_true", help="print the plan, run nothing")
    return p


def algorithms_of(base: dict[str, Any], wanted: str | None) -> list[dict[str, Any]]:
    """The base sweep's algorithm sections (each with ``params``), or the subset named."""
    sections = [{"params": {}, **copy.deepcopy(a)} for a in base["sweep"]["algorithm"]]
    if wanted is None:
        return sections
    names = [a["name"] for a in sections]
    chosen = [x.strip() for x in wanted.split(",") if x.strip()]
    if not chosen or (unknown := [x for x in chosen if x not in names]):
        shown = ", ".join(unknown) if chosen else repr(wanted)
        raise ScenarioError(
            f"--algorithms: {shown} not allowed; allowed values: {', '.join(names)}"
        )
    return [a for a in sections if a["name"] in chosen]


def scenarios(args: argparse.Namespace) -> tuple[dict[str, Any], dict[str, Any]]:
    """(grid, final base): the grid's scenario, and the final runs' before
    :func:`with_choices` (their algorithm sections under ``sections``)."""
    base = read_scenario_file(args.base)
    name = base.pop("name", args.base.stem)
    sections = algorithms_of(base, args.algorithms)
    base["training"]["device"] = args.device
    if args.batched != "off":  # off, the default, leaves the runs' scenario as it was
        base["training"]["batched"] = args.batched
    if args.model:
        base["model"]["name"] = args.model
    if args.eval_every:
        base["eval_every"] = args.eval_every
    final = copy.deepcopy(base)
    final.update(name=f"{name}_final", seeds=list(args.seeds), sweep={})
    final["rounds"] = args.rounds or base["rounds"]
    final["sweep"]["availability.dynamics"] = base["sweep"]["availability.dynamics"]
    final["algorithm"] = sections[0]
    final["sections"] = sections  # with_choices zips them with their pairs
    grid = copy.deepcopy(base)
    grid.update(name=f"{name}_grid", rounds=args.tune_rounds, seeds=list(args.tune_seeds))
    grid["availability"]["params"]["dynamics"] = args.tune_dynamics
    grid["client_metrics"] = args.select != "accuracy"  # only a train metric needs them
    grid["sweep"] = {
        "algorithm": sections,
        "training.lr": list(args.lrs),
        "algorithm.server_lr": list(args.server_lrs),
    }
    return grid, final


def with_choices(final: dict[str, Any], choices: dict[str, tuple[str, ...]]) -> dict[str, Any]:
    """The final scenario: its dynamics x one zipped row per algorithm at its pair (the
    algorithm sections are the grid's, :func:`scenarios`)."""
    out = copy.deepcopy(final)
    sections = {a["name"]: a for a in out.pop("sections")}
    rows = [[sections[n], float(lr), float(slr)] for n, (lr, slr) in choices.items()]
    out["sweep"]["algorithm, training.lr, algorithm.server_lr"] = rows
    return out


def write_scenario(out: Path, data: dict[str, Any]) -> Path:
    path = out / "scenarios" / f"{data['name']}.yaml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def plan(grid: dict[str, Any], final: dict[str, Any], n_algorithms: int) -> list[str]:
    """The runs, one line each: the grid's (variant, seed) and the final runs' count."""
    variants = parse_scenario(grid).variants()
    lines = [
        f"grid: {grid['name']}, {grid['rounds']} rounds, dynamics "
        f"{grid['availability']['params']['dynamics']}"
    ]
    lines += [f"  {label} seed={s}" for label, _ in variants for s in grid["seeds"]]
    dyn = final["sweep"]["availability.dynamics"]
    lines.append(
        f"final: {final['name']}, {final['rounds']} rounds: {n_algorithms} algorithms at their "
        f"chosen pair x {len(dyn)} dynamics x seeds {final['seeds']} = "
        f"{n_algorithms * len(dyn) * len(final['seeds'])} runs"
    )
    return lines


def fedram(*argv: str) -> None:
    if (code := cli.main([str(a) for a in argv])) != 0:
        raise SystemExit(f"fedram {' '.join(map(str, argv))}: exit status {code}")


def grid_runs(root: Path, grid: dict[str, Any]) -> RunSet:
    """The runs of ``grid`` in ``root``: its variants and seeds (other runs in the folder,
    e.g. of a wider grid tried later, are left out)."""
    labels = {label for label, _ in parse_scenario(grid).variants()}
    seeds = {f"seed{s}" for s in grid["seeds"]}
    rs = RunSet.load(root)
    return RunSet(rs.root, [r for r in rs.runs if r.label in labels and r.path.name in seeds])


def select(root: Path, grid: dict[str, Any], metric: str) -> dict[str, tuple[str, ...]]:
    """Each algorithm's chosen (eta_0, eta_g) over the runs of ``grid``
    (:func:`grid_runs`), once all are complete."""
    rs = grid_runs(root, grid)
    names = [a["name"] for a in grid["sweep"]["algorithm"]]
    expected = len(grid["sweep"]["training.lr"]) * len(grid["sweep"]["algorithm.server_lr"])
    expected *= len(grid["seeds"])
    done = {n: sum(r.complete and r.fields.get("name") == n for r in rs.runs) for n in names}
    if missing := {n: k for n, k in done.items() if k < expected}:
        raise SystemExit(
            "the grid is not complete (rerun to resume it): "
            + ", ".join(f"{n} {k} of {expected} runs" for n, k in missing.items())
        )
    chosen = chosen_rates(rs, metric)
    return {n: chosen[n] for n in names}


def summary(args: argparse.Namespace, grid: dict, final: dict, chosen: dict) -> str:
    """OUT/fedawe_table2_tuned.md: options, the pairs beside Table 7, the tables."""
    scaled = [
        f"final rounds {final['rounds']} (paper 2000)" if final["rounds"] != 2000 else "",
        f"tuning rounds {grid['rounds']} (paper 500)" if grid["rounds"] != 500 else "",
        f"eta_0 grid {args.lrs} (paper {list(LRS)})" if tuple(args.lrs) != LRS else "",
        f"eta_g grid {args.server_lrs} (paper {list(SERVER_LRS)})"
        if tuple(args.server_lrs) != SERVER_LRS
        else "",
        f"algorithms {list(chosen)} (paper all eight)" if len(chosen) < len(ALGORITHMS) else "",
        f"model {final['model']['name']} (paper: the CNNs of Table 6)"
        if not final["model"]["name"].startswith("fedawe-cnn")
        else "",
    ]
    scaled = [s for s in scaled if s] or ["none"]
    lines = [
        "# FedAWE Table 2 with the paper's tuning protocol\n",
        "Command: `python scripts/fedawe_table2_tuned.py " + " ".join(sys.argv[1:]) + "`\n",
        f"- Grid: {len(args.lrs)} eta_0 x {len(args.server_lrs)} eta_g per algorithm, "
        f"{grid['rounds']} rounds, dynamics {args.tune_dynamics}, tuning seeds "
        f"{args.tune_seeds}; selection: the best `{args.select}` "
        f"({CRITERIA[args.select][1]}), mean over the evaluations of the last 20% of rounds "
        "and over the tuning seeds.",
        f"- Final: {final['rounds']} rounds, the four dynamics, seeds {final['seeds']}, "
        f"model `{final['model']['name']}`, eval every {final['eval_every']} rounds, "
        f"device {args.device}, training.batched {args.batched}.",
        f"- **Scaled down from the paper**: {'; '.join(scaled)}.\n",
        "## Chosen (eta_0, eta_g) beside the paper's Table 7\n",
        "| algorithm | ours | paper (SVHN, CIFAR-10, CINIC-10) |",
        "|---|---|---|",
    ]
    lines += [
        f"| {ALGORITHMS[n]} (`{n}`) | {lr}, {slr} | {TABLE7[n][0]}, {TABLE7[n][1]} |"
        for n, (lr, slr) in chosen.items()
    ]
    rs = RunSet.load(args.out / final["name"])
    lines += ["\n## Our Table 2\n", last_rounds_table(rs)]
    lines += ["\n## Beside the paper's Table 2, row by row\n", comparison_section(rs)]
    lines += [
        "\n## The grid\n",
        rate_grid_section(grid_runs(args.out / grid["name"], grid), args.select),
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        grid, final = scenarios(args)
    except ScenarioError as err:
        print(f"fedawe_table2_tuned: error: {err}", file=sys.stderr)
        return 2
    names = [a["name"] for a in grid["sweep"]["algorithm"]]
    if args.dry_run:
        print("\n".join(plan(grid, final, len(names))))
        return 0
    ray = ["--ray"] if args.ray else []
    fedram("run", write_scenario(args.out, grid), "--out", args.out, *ray)
    chosen = select(args.out / grid["name"], grid, args.select)
    write_report(args.out / grid["name"], select=args.select)
    if args.stage == "tune":
        print("\n".join(f"{n}: eta_0 {lr}, eta_g {slr}" for n, (lr, slr) in chosen.items()))
        return 0
    final = with_choices(final, chosen)
    fedram("run", write_scenario(args.out, final), "--out", args.out, *ray)
    write_report(args.out / final["name"])
    page = args.out / "fedawe_table2_tuned.md"
    page.write_text(summary(args, grid, final, chosen))
    print(f"wrote {page}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
