"""What a failed ``flwr run`` reports (:mod:`fedram_flwr.engines.flwr.errors`)."""

from __future__ import annotations

from pathlib import Path

from fedram_flwr.engines.flwr.errors import run_error, superlink_verdict

CLI = [
    "Using SuperLink: fedram-simulation (127.0.0.1:28129)",
    "Successfully started run 2067565400496288396",
    "\x1b[92mINFO \x1b[0m:      Starting FedBuff: 5 server steps",
]
SUPERLINK = """\
\x1b[92mINFO \x1b[0m:      Created run 2067565400496288396 in federation @none/default
\x1b[92mINFO \x1b[0m:      Created run 5014855021289584221 in federation @none/default
\x1b[91mERROR \x1b[0m:     [ApiError:18] Cannot stop run 5014855021289584221 for \
flwr_aid=<id:none>; run is already finished with status=RunStatus(status='finished', \
sub_status='completed', details='')
\x1b[91mERROR \x1b[0m:     [ApiError:18] Cannot stop run 2067565400496288396 for \
flwr_aid=<id:none>; run is already finished with status=RunStatus(status='finished', \
sub_status='failed', details='No heartbeat received from the task')
\x1b[92mINFO \x1b[0m:      Started task 4588100156614622359 of run 5014855021289584221
"""


def test_the_superlinks_verdict_on_this_run_is_named(tmp_path: Path) -> None:
    """A run the SuperLink ended (its ServerApp unheard for Flower's heartbeat patience)
    is reported with the SuperLink's reason, found by the run's id, not another run's."""
    log = tmp_path / "superlink.log"
    log.write_text(SUPERLINK)
    verdict = "the SuperLink ended run 2067565400496288396: No heartbeat received from the task"
    assert superlink_verdict(CLI, log) == verdict
    error = run_error("the Flower run failed", CLI, tmp_path / "flwr-run.log", log)
    assert str(error).startswith(f"the Flower run failed: {verdict}\n")
    assert superlink_verdict(CLI[:1], log) is None  # no run id: nothing to look for
    assert superlink_verdict(CLI, tmp_path / "missing.log") is None
    other = [line.replace("2067565400496288396", "1") for line in CLI]
    assert superlink_verdict(other, log) is None
