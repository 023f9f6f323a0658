"""The Flower line this process runs on, and the one place where the lines differ.

The project runs on two Flower lines from one code base (``constraints.txt``: the newest,
the default; ``constraints-1.39.txt``: 1.39, the last whose SuperNodes reach the
SuperLink over gRPC). What differs between them, as read in their wheels and tried here:

- **Fleet transport.** On 1.39 a SuperNode reaches the SuperLink's Fleet API over gRPC,
  on a port of its own (``flower-superlink --fleet-api-address HOST:9092``,
  ``flower-supernode --superlink HOST:9092``). From 1.40 on, the SuperLink serves Fleet,
  Control and ServerAppIo over one HTTP port (``--host``/``--port``, 8000 by default;
  ``flower-supernode --superlink HOST:8000``, HTTPS unless ``--insecure``);
  ``--fleet-api-address`` is deprecated there and the gRPC Fleet only starts behind an
  internal environment variable.

Everything else the project uses (``flwr run``, ``$FLWR_HOME/config.toml``, the
Simulation Engine on Ray, both APIs, the TLS flags) is the same on both lines. No other
module tests Flower's version: they ask :data:`LINE`.
"""

from __future__ import annotations

from dataclasses import dataclass
from importlib.metadata import PackageNotFoundError, version
from typing import Literal

FIRST_HTTP_FLEET = (1, 40)
"""The first Flower minor version whose Fleet API is served over HTTP."""


@dataclass(frozen=True)
class FlowerLine:
    """What the project needs to know of an installed Flower.

    Attributes
    ----------
    version : str
        flwr's version string, e.g. ``"1.42.0"``.
    fleet : {"gRPC", "HTTP"}
        How SuperNodes reach the SuperLink's Fleet API.
    """

    version: str
    fleet: Literal["gRPC", "HTTP"]

    def superlink_fleet_flags(self, host: str, fleet_port: int) -> list[str]:
        """``flower-superlink`` flags that open the Fleet API for SuperNodes.

        Parameters
        ----------
        host : str
            The address to serve on.
        fleet_port : int
            The gRPC Fleet's port (1.39); unused on HTTP lines, where Fleet shares the
            SuperLink's ``--port``.
        """
        if self.fleet == "gRPC":
            return ["--fleet-api-address", f"{host}:{fleet_port}"]
        return []

    def describe(self) -> str:
        """One line for logs: ``"flwr 1.42.0, Fleet over HTTP"``."""
        return f"flwr {self.version}, Fleet over {self.fleet}"


def line_of(flwr_version: str) -> FlowerLine:
    """The :class:`FlowerLine` of a flwr version string (``"1.39.0"``, ``"1.43.0.dev2026"``).

    Raises
    ------
    ValueError
        When the string does not start with ``MAJOR.MINOR``.
    """
    try:
        major, minor = (int(part) for part in flwr_version.split(".")[:2])
    except ValueError:
        raise ValueError(f"flwr version {flwr_version!r} is not MAJOR.MINOR[...]") from None
    fleet: Literal["gRPC", "HTTP"] = "HTTP" if (major, minor) >= FIRST_HTTP_FLEET else "gRPC"
    return FlowerLine(flwr_version, fleet)


DISTRIBUTIONS = ("flwr", "flwr-nightly")
"""The names Flower is installed under: releases, and the nightly builds (same package)."""


def installed_line() -> FlowerLine:
    """The line of the flwr installed in this interpreter's environment (a release, or
    a ``flwr-nightly`` build)."""
    for name in DISTRIBUTIONS:
        try:
            return line_of(version(name))
        except PackageNotFoundError:
            continue
    raise ModuleNotFoundError("flwr is not installed: pip install fedram-flwr")


LINE = installed_line()
"""The installed Flower line."""
