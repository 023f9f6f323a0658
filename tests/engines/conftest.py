"""Fixtures of the engine tests: the test session's Flower runs (:mod:`tests.engines.background`)
and the in-process runs they are compared with."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from fedram_flwr.engines import run_in_process
from fedram_flwr.registry import load_scenario
from fedram_flwr.rundir.outputs import RunDirectory
from tests.engines.background import BackgroundRuns, selected_specs
from tests.engines.cases import write_scenario
from tests.helpers import SEED


@pytest.fixture(scope="session")
def flower_runs(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[BackgroundRuns]:
    """Every Flower run the selected tests name, started in the background at once."""
    runs = BackgroundRuns(tmp_path_factory.mktemp("flower"), selected_specs(request.session.items))
    try:
        runs.start()
        yield runs
    finally:
        runs.close()


class References(dict):
    """Case name -> its legacy in-process run, made on first use."""

    def __init__(self, root: Path) -> None:
        super().__init__()
        self.root = root

    def __missing__(self, case: str) -> RunDirectory:
        path = write_scenario(case, self.root / "scenarios")
        self[case] = run_in_process(load_scenario(path), SEED, self.root / case)
        return self[case]


@pytest.fixture(scope="session")
def references(tmp_path_factory: pytest.TempPathFactory) -> References:
    """Each case of :mod:`tests.engines.cases` in-process through the legacy API: the
    run every engine and API must give."""
    return References(tmp_path_factory.mktemp("references"))
