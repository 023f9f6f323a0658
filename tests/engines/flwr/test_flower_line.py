"""fedram_flwr.engines.flwr.flower_line: which Flower line is installed, and the SuperLink
flags that differ between the lines, checked against each line's own command-line parser."""

from __future__ import annotations

import flwr
import pytest
from flwr.superlink.cli.flower_superlink import _parse_args_run_superlink

from fedram_flwr.engines.flwr.flower_line import LINE, line_of


@pytest.mark.parametrize(
    ("version", "fleet"),
    [
        ("1.39.0", "gRPC"),
        ("1.39.7", "gRPC"),
        ("1.40.0", "HTTP"),
        ("1.42.0", "HTTP"),
        ("1.43.0.dev20261026", "HTTP"),
        ("2.0.0", "HTTP"),
        ("1.9.2", "gRPC"),  # 1.9 < 1.40: minor versions compare as numbers, not text
    ],
)
def test_the_fleet_transport_follows_the_minor_version(version: str, fleet: str) -> None:
    line = line_of(version)
    assert (line.version, line.fleet) == (version, fleet)
    assert f"Fleet over {fleet}" in line.describe()


def test_a_version_without_major_and_minor_is_refused() -> None:
    for bad in ("", "1", "one.two", "1.x.0"):
        with pytest.raises(ValueError, match="MAJOR.MINOR"):
            line_of(bad)


def test_the_installed_line_is_flwrs_own_version() -> None:
    assert LINE.version == flwr.__version__
    assert LINE == line_of(flwr.__version__)


def test_fleet_flags_are_what_the_installed_superlink_takes() -> None:
    """On a gRPC line the flag opens the Fleet API on its own port (the parsed address is
    the one given); on an HTTP line no flag is needed (Fleet shares ``--port``)."""
    flags = LINE.superlink_fleet_flags("127.0.0.1", 23456)
    args = _parse_args_run_superlink().parse_args(["--insecure", "--port", "23457", *flags])
    assert args.port == 23457
    if LINE.fleet == "gRPC":
        assert args.fleet_api_address == "127.0.0.1:23456"
    else:
        assert flags == []
    assert line_of("1.39.0").superlink_fleet_flags("h", 1) == ["--fleet-api-address", "h:1"]
    assert line_of("1.42.0").superlink_fleet_flags("h", 1) == []


def test_a_nightly_build_counts_as_its_line(monkeypatch: pytest.MonkeyPatch) -> None:
    """``flwr-nightly`` installs the same package under another name (tried with
    1.43.0.dev20261026): its version gives the line; with neither installed, a clear
    error."""
    from importlib.metadata import PackageNotFoundError

    from fedram_flwr.engines.flwr import flower_line

    def only(installed: dict[str, str]):
        def version(name: str) -> str:
            if name not in installed:
                raise PackageNotFoundError(name)
            return installed[name]

        return version

    monkeypatch.setattr(flower_line, "version", only({"flwr-nightly": "1.43.0.dev20261026"}))
    assert flower_line.installed_line() == line_of("1.43.0.dev20261026")
    monkeypatch.setattr(flower_line, "version", only({}))
    with pytest.raises(ModuleNotFoundError, match="flwr is not installed"):
        flower_line.installed_line()
