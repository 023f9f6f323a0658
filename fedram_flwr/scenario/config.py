"""Typed, frozen scenario configuration loaded from YAML.

A scenario file is the single source of truth of a run. Every section is a frozen
dataclass; unknown keys and bad values raise :class:`ScenarioError` naming the field
(``algorithm.alpha``) and the allowed values. This module is the schema only and imports
nothing from the package but its leaves :mod:`fedram_flwr.scenario.schema` (the error and the
YAML coercion), :mod:`fedram_flwr.scenario.sweep` (sweeps and dotted overrides) and
:mod:`fedram_flwr.scenario.time_config` (the ``time:`` section) and
:mod:`fedram_flwr.scenario.data_config` (the ``data:`` section):
``algorithm.params`` and ``availability.params`` are checked by the parameter class
registered for their name, in :mod:`fedram_flwr.registry`, whose
``load_scenario`` / ``scenario_from_dict`` / ``with_overrides`` (schema + registry) are
the ways to make a scenario.

Relative paths (``data.root``, an oracle's ``params.path``, e.g. the trace file) resolve
against the working directory of the process that loads the scenario, when it is loaded
(:func:`fedram_flwr.scenario.schema.absolute_path`): a resolved scenario holds absolute paths, so
the run folder's ``scenario.yaml`` and the scenario ``fedram run`` hands the Flower
engines (whose processes run in other folders) name the files the in-process engine reads.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from fedram_flwr.scenario.data_config import MAX_CLIENTS as MAX_CLIENTS  # the data section
from fedram_flwr.scenario.data_config import DataConfig as DataConfig
from fedram_flwr.scenario.schema import (
    MAX_YAML_CHARS,
    ScenarioError,
    absolute_path,
    build_dataclass,
    check_range,
    load_yaml,
    plain_name,
)
from fedram_flwr.scenario.sweep import apply_overrides as apply_overrides
from fedram_flwr.scenario.sweep import label_part, plain, swept_values
from fedram_flwr.scenario.time_config import (  # the time section, re-exported
    ClockAvailabilityConfig as ClockAvailabilityConfig,
)
from fedram_flwr.scenario.time_config import LogNormalLaw as LogNormalLaw
from fedram_flwr.scenario.time_config import RoundPolicyConfig as RoundPolicyConfig
from fedram_flwr.scenario.time_config import SpeedsConfig as SpeedsConfig
from fedram_flwr.scenario.time_config import TimeConfig

DEFAULT_MAX_FAILED_ROUNDS = 3
"""``max_failed_rounds``'s default: rounds in a row in which every selected client failed
(nothing aggregated) after which a run stops with an error quoting the clients' first
error (:mod:`fedram_flwr.strategies.rounds`; the strategies' and ``with_availability``'s
argument of the same name defaults to it too)."""

MAX_ROUNDS = 1_000_000
"""The most rounds a scenario may have (``rounds``, ``max_failed_rounds``): the smallest
model's round takes about a millisecond in-process and writes a row of ``metrics.jsonl``,
so a million rounds is hours of work and hundreds of MB of rows; a larger count would
never finish."""
ROUNDS_BOUND = "a million rounds would take hours even for the smallest model"

MAX_SEED = 2**32 - 1
"""Seeds are 0..2**32 - 1: numpy's legacy ``RandomState`` range, well inside what
``SeedSequence`` (any integer >= 0) and ``torch.Generator.manual_seed`` (< 2**64) take."""


# --------------------------------------------------------------------------- sections
@dataclass(frozen=True)
class AvailabilityConfig:
    """Which availability oracle (ClientManager) relays clients, and its parameters."""

    oracle: str = "ram"
    params: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        # An oracle's ``path`` (the trace file) is a path like data.root: made absolute.
        if isinstance(self.params.get("path"), str):
            params = {**self.params, "path": absolute_path(self.params["path"])}
            object.__setattr__(self, "params", params)


@dataclass(frozen=True)
class AlgorithmConfig:
    """Which server strategy / client objective, and its hyper-parameters."""

    name: str = "fedavg"
    params: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class TrainingConfig:
    """Local mini-batch SGD every participating client runs (Alg. 1, lines 5-10)."""

    lr: float = 0.01
    local_epochs: int = 1
    # K mini-batch steps instead of local_epochs epochs (FedAR Sec. 6.1: K = 5).
    local_steps: int | None = None
    batch_size: int = 128
    weight_decay: float = 0.0
    # False: a pass's last, smaller mini-batch (B not dividing n) is a step of its own;
    # True: it is dropped, as the FedAR/MIFA/FedVARP/FedAU authors' code does (for a
    # client with few examples under 1/p_i weighting, that step adds update variance).
    drop_last: bool = False
    # The local step size over rounds: constant, or FedAWE's inv-sqrt eta_0 / sqrt(t/10 + 1)
    # with t = round - 1 (FedAWE App. J, Table 6; fedram_flwr.clients.lr_schedule).
    lr_schedule: Literal["constant", "inv-sqrt"] = "constant"
    # Where clients train and the server evaluates: cpu, cuda (an NVIDIA GPU), or auto
    # (cuda where torch sees one, else cpu). Data and models stay on it; GPU arithmetic
    # rounds differently from the CPU's (results agree to a tolerance, not bit for bit).
    device: Literal["cpu", "cuda", "auto"] = "cpu"
    # The in-process engines' rounds: each client's local SGD in turn (off), or the round's
    # clients' SGD as one stacked torch.func computation (on; auto: where it is exact and
    # faster, fedram_flwr.clients.batched_round). Results agree to float32 rounding.
    batched: Literal["auto", "on", "off"] = "off"

    def __post_init__(self) -> None:
        check_range("training.lr", self.lr, 0.0, None, lo_open=True)
        check_range("training.local_epochs", self.local_epochs, 1, None)
        if self.local_steps is not None:
            check_range("training.local_steps", self.local_steps, 1, None)
        check_range("training.batch_size", self.batch_size, 1, None)
        check_range("training.weight_decay", self.weight_decay, 0.0, None)


@dataclass(frozen=True)
class ModelConfig:
    name: Literal[
        "logreg",
        "mlp",
        "cnn",
        "lenet5",
        "resnet18",
        "fedawe-cnn-svhn",
        "fedawe-cnn-cifar10",
        "fedawe-cnn-cinic10",
    ] = "cnn"


@dataclass(frozen=True)
class Scenario:
    """One experiment: data, availability, algorithm, model, schedule and seeds."""

    name: str
    rounds: int
    data: DataConfig = field(default_factory=DataConfig)
    availability: AvailabilityConfig = field(default_factory=AvailabilityConfig)
    algorithm: AlgorithmConfig = field(default_factory=AlgorithmConfig)
    training: TrainingConfig = field(default_factory=TrainingConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    # The time model: None counts rounds, one round per tick, as before.
    time: TimeConfig | None = None
    eval_every: int = 10
    # At each evaluation also the global model's loss on the union of the clients'
    # training data and its accuracy on each client's own data (FedAR Sec. 6, Table 3),
    # and on each client's test data with the HCVaR of the clients' test losses (RC-FL
    # Sec. 6, Table 1; evaluation.client_test_metrics).
    client_metrics: bool = False
    # alpha of that HCVaR (RC-FL Def. 2): one value for all clients or one per client.
    hcvar_alpha: tuple[float, ...] = (0.5,)
    seeds: tuple[int, ...] = (0,)
    # Rounds in a row in which every selected client failed (errors, NaN or inf updates:
    # nothing aggregated) after which the run stops, failed, quoting the first error.
    max_failed_rounds: int = DEFAULT_MAX_FAILED_ROUNDS
    # Grid of dotted-field overrides, expanded into one variant per combination; a
    # section's values may be whole mappings (``algorithm: [{name: afl, params: ...}]``,
    # labelled ``name=afl``) so each algorithm keeps its own parameters.
    sweep: Mapping[str, list[Any]] = field(default_factory=dict)
    description: str = ""

    def __post_init__(self) -> None:
        check_range("rounds", self.rounds, 1, MAX_ROUNDS, bound=ROUNDS_BOUND)
        check_range("eval_every", self.eval_every, 1, None)
        check_range("max_failed_rounds", self.max_failed_rounds, 1, MAX_ROUNDS, bound=ROUNDS_BOUND)
        if len(self.hcvar_alpha) not in (1, self.data.num_clients):
            raise ScenarioError(
                f"hcvar_alpha: give one value or one per client ({self.data.num_clients}), "
                f"got {len(self.hcvar_alpha)}"
            )
        if self.time is not None:
            self.time.check_clients(self.data.num_clients)
        for i, a in enumerate(self.hcvar_alpha):
            check_range(f"hcvar_alpha[{i}]", a, 0.0, 1.0, lo_open=True)
        if not self.seeds:
            raise ScenarioError("seeds: give at least one seed, e.g. seeds: [0, 1, 2]")
        for i, seed in enumerate(self.seeds):
            check_range(f"seeds[{i}]", seed, 0, MAX_SEED)
        plain_name(self.name, "name")  # a folder of every run's path
        swept_values(self.sweep)  # the keys' value lists and zipped rows, named
        if self.sweep:  # a bad sweep key or value fails at load time, not mid-run
            try:
                self.variants()
            except ScenarioError as err:
                raise ScenarioError(f"sweep: {err}") from None

    # -------------------------------------------------------------- conveniences
    def to_dict(self) -> dict[str, Any]:
        out = plain(dataclasses.asdict(self))
        # Defaults of settings added later are left out: run folders (scenario.yaml,
        # fingerprints) written before the setting existed still match their scenarios.
        for key, default in (("device", "cpu"), ("lr_schedule", "constant"), ("batched", "off")):
            if out["training"][key] == default:
                del out["training"][key]
        if out["max_failed_rounds"] == DEFAULT_MAX_FAILED_ROUNDS:
            del out["max_failed_rounds"]
        if out["time"] is None:
            del out["time"]
        else:
            for key, default in (
                ("clock", "simulated"),
                ("emulate", False),
                ("emulate_from", "node"),
            ):
                if out["time"][key] == default:
                    del out["time"][key]
        return out

    def variants(self) -> list[tuple[str, Scenario]]:
        """Expand ``sweep`` into ``(label, scenario)`` pairs (one pair when empty).

        Schema-checked here; the registry validated every variant with the scenario."""
        if not self.sweep:
            return [("default", self)]
        out = []
        for swept in swept_values(self.sweep):
            label = "_".join(label_part(k, v) for k, v in swept.items())
            base = self.to_dict()
            base["sweep"] = {}
            out.append((label, parse_scenario(apply_overrides(base, swept))))
        labels = [label for label, _ in out]
        if len(set(labels)) < len(labels):
            dup = next(x for x in labels if labels.count(x) > 1)
            raise ScenarioError(
                f"sweep: two variants are labelled {dup!r} (a section given as a mapping is "
                "labelled by its name only); sweep the differing field instead"
            )
        return out


# ----------------------------------------------------------------------- loading
def read_scenario_file(path: str | Path) -> dict[str, Any]:
    """The raw mapping of a scenario YAML file (``name`` defaults to the file's stem)."""
    path = Path(path)
    if not path.is_file():
        if path.exists():  # a folder, a FIFO (which would block a read), a device
            raise ScenarioError(f"{path}: not a regular file; give a scenario's YAML file")
        raise ScenarioError(f"scenario file not found: {path}")
    try:
        with path.open("rb") as fh:  # at most what load_yaml reads, whatever the file's size
            data = fh.read(4 * MAX_YAML_CHARS + 1)
        if len(data) > 4 * MAX_YAML_CHARS:
            raise ScenarioError(f"{path}: refused: over {4 * MAX_YAML_CHARS:,} bytes of YAML")
        text = data.decode("utf-8")
    except UnicodeDecodeError as err:
        raise ScenarioError(
            f"{path}: not UTF-8 text (byte 0x{err.object[err.start]:02x} at offset {err.start})"
        ) from None
    except OSError as err:
        raise ScenarioError(f"{path}: cannot read ({err.strerror})") from None
    raw = load_yaml(text, str(path))
    if not isinstance(raw, dict):
        raise ScenarioError(f"{path}: a scenario must be a YAML mapping")
    raw.setdefault("name", path.stem)
    return raw


def parse_scenario(raw: Mapping[str, Any]) -> Scenario:
    """The schema half of :func:`fedram_flwr.registry.scenario_from_dict`: types, ranges
    and keys of every section, not the registered ``params``."""
    return build_dataclass(Scenario, raw, "")


Check = Callable[[Scenario], Scenario]
"""A check of a parsed scenario that returns it or raises :class:`ScenarioError`."""


def parse_scenario_file(path: str | Path, check: Check | None = None) -> Scenario:
    """Read and parse a scenario YAML file, then ``check`` it (the registry's ``validate``,
    in :func:`fedram_flwr.registry.load_scenario`; none on a node, which reads the file its
    server validated); errors name the file and the field."""
    raw = read_scenario_file(path)
    try:
        scenario = parse_scenario(raw)
        return scenario if check is None else check(scenario)
    except ScenarioError as err:
        raise ScenarioError(f"{path}: {err}") from None


def parse_with_overrides(
    scenario: Scenario, overrides: Mapping[str, Any], check: Check | None = None
) -> Scenario:
    """A copy of ``scenario`` with dotted-path overrides (``algorithm.params.alpha``, or
    its short form ``algorithm.alpha``), parsed, then ``check``-ed (as
    :func:`parse_scenario_file`)."""
    changed = parse_scenario(apply_overrides(scenario.to_dict(), overrides))
    return changed if check is None else check(changed)
