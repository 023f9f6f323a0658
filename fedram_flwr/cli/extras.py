"""The ``experiments`` extra (torch, torchvision, Flower's Simulation Engine): what a
``fedram`` installed without it can still do (``--help``, ``show``: the schema and the
registry import no torch), and the error that names the extra where it is needed."""

from __future__ import annotations

from fedram_flwr.scenario.schema import ScenarioError

EXTRA = "experiments"
INSTALL = f"pip install 'fedram-flwr[{EXTRA}]'"
EXTRA_MODULES = ("torch", "torchvision", "ray")
"""Top-level modules only the extra installs."""


class MissingExtraError(ScenarioError):
    """A command or class needs a module of the ``experiments`` extra, which is not
    installed; the message says how to install it."""


def is_missing_extra(err: ImportError) -> bool:
    """Whether ``err`` is the import of a module only the extra installs."""
    name = getattr(err, "name", None) or ""
    return isinstance(err, ModuleNotFoundError) and name.split(".")[0] in EXTRA_MODULES


def missing_extra(what: str, err: ImportError) -> MissingExtraError:
    """The error for ``what`` needing the extra that ``err`` found missing."""
    return MissingExtraError(
        f"{what} needs the '{EXTRA}' extra (torch, torchvision, Flower's simulation), "
        f"which is not installed here ({err}): {INSTALL}"
    )
