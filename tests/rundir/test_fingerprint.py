"""What a run computed (fedram_flwr/rundir/fingerprint.py) and where it may go
(fedram_flwr/rundir/directory.py's ``run_folder``)."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import yaml

from fedram_flwr.registry import load_scenario
from fedram_flwr.registry.app_config import scenario_from_run_config
from fedram_flwr.rundir import RunDirectory, code_version, run_folder, scenario_fingerprint
from fedram_flwr.scenario.config import ScenarioError
from tests.helpers import TINY_GAUSSIAN


def test_the_fingerprint_is_the_resolved_scenario_and_seed_not_the_seed_list() -> None:
    base = copy.deepcopy(TINY_GAUSSIAN)
    fp = scenario_fingerprint(base, 0)
    assert scenario_fingerprint({**base, "seeds": [0, 1, 2]}, 0) == fp
    assert scenario_fingerprint(base, 1) != fp
    changed = copy.deepcopy(base)
    changed["training"]["lr"] = 0.5
    assert scenario_fingerprint(changed, 0) != fp


def test_the_flower_engines_scenario_has_the_clis_fingerprint(tmp_path: Path) -> None:
    """The ServerApp reloads the CLI's ``requested-scenario.yaml``: same fingerprint, so
    a complete flwr run is skipped like an in-process one."""
    path = tmp_path / "tiny.yaml"
    path.write_text(yaml.safe_dump({**TINY_GAUSSIAN, "sweep": {"algorithm.alpha": [1.0, 0.1]}}))
    for _, variant in load_scenario(path).variants():
        requested = tmp_path / "requested-scenario.yaml"
        requested.write_text(yaml.safe_dump({**variant.to_dict(), "seeds": [3]}))
        reloaded = scenario_from_run_config.__wrapped__(str(requested), "")
        assert scenario_fingerprint(reloaded.to_dict(), 3) == scenario_fingerprint(
            variant.to_dict(), 3
        )


def test_a_started_run_records_its_fingerprint_and_code(tmp_path: Path) -> None:
    run = RunDirectory(tmp_path)
    run.start(copy.deepcopy(TINY_GAUSSIAN), 0, engine="in-process")
    recorded = run.fingerprint()
    assert recorded["scenario"] == scenario_fingerprint(TINY_GAUSSIAN, 0)
    assert recorded["code"] == code_version() and len(code_version()["source"]) == 64
    assert run.changes(TINY_GAUSSIAN, 0) is None
    assert run.changes({**TINY_GAUSSIAN, "rounds": 9}, 0) == "rounds: 6 -> 9"


@pytest.mark.parametrize(("name", "label"), [("..", "x"), ("ok", ".."), ("ok", "a/b"), ("", "x")])
def test_run_folders_never_leave_out(tmp_path: Path, name: str, label: str) -> None:
    with pytest.raises(ScenarioError, match="cannot name a run folder"):
        run_folder(tmp_path, name, label, 0)
    assert run_folder(tmp_path, "n", "p_min=0.1", 2) == tmp_path / "n" / "p_min=0.1" / "seed2"


def test_a_staged_flower_app_has_the_checkouts_code_fingerprint(tmp_path: Path) -> None:
    """``--engine flwr|deployment`` run the copy :func:`stage_app` makes, with
    ``strategies/`` and ``clients/`` inside ``fedram_flwr/``: its code is the checkout's
    code, so it must hash to the in-process runs' fingerprint (it hashed them twice, once
    under ``fedram_flwr``, and a rerun said "made by other code")."""
    from fedram_flwr.engines.flwr.staging import stage_app
    from fedram_flwr.rundir.fingerprint import SOURCE_PACKAGES, source_digest

    repo = Path(__file__).resolve().parents[2]
    staged = stage_app(repo, tmp_path / "app") / "fedram_flwr"
    roots = {  # what importlib finds when Flower puts the app first on sys.path
        "fedram_flwr": [staged],
        "fedram_flwr.strategies": [staged / "strategies"],
        "fedram_flwr.clients": [staged / "clients"],
    }
    assert list(roots) == list(SOURCE_PACKAGES)
    assert (staged / "strategies" / "base.py").is_file()
    assert source_digest(roots) == code_version()["source"]
    (staged / "strategies" / "base.py").write_text("# changed\n")
    assert source_digest(roots) != code_version()["source"]


def test_flower_ships_every_file_the_fingerprint_hashes() -> None:
    """Flower leaves files out of a FAB (``test_*.py``, ``*_test.py``, ``lib/``, ...): a
    package file of such a name would be hashed in a checkout and missing from the
    engines' copy, and the fingerprints would differ again."""
    import warnings

    import tomli
    from flwr.cli.utils import build_pathspec
    from flwr.common.constant import FAB_EXCLUDE_PATTERNS

    from fedram_flwr.engines.flwr.staging import installed_layout

    repo = Path(__file__).resolve().parents[2]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        excluded = build_pathspec(list(FAB_EXCLUDE_PATTERNS))
    layout = installed_layout(tomli.loads((repo / "pyproject.toml").read_text()))
    folders = ["fedram_flwr", *layout]
    files = [p.relative_to(repo).as_posix() for f in folders for p in (repo / f).rglob("*.py")]
    assert len(files) > 50
    assert [f for f in files if excluded.match_file(f)] == []
