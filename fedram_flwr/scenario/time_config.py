"""The scenario's ``time:`` section: device speeds, availability on a simulated
clock and the round policy. A leaf of the schema, like :mod:`fedram_flwr.scenario.config` (which
re-exports every class here): it imports nothing from the package but
:mod:`fedram_flwr.scenario.schema`. Errors name the field (``time.policy.deadline_s``) and what is
allowed.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from types import SimpleNamespace
from typing import Any, Literal

from fedram_flwr.scenario.schema import ScenarioError, absolute_path, check_range

MAX_SIM_SECONDS = 1e9
"""The longest simulated span a scenario may give (an availability period, slot or tick):
about 32 years, far past the end of any run's clock; larger spans (``1e308``) overflow
the laws' arithmetic into NaN probabilities."""
SIM_SECONDS_BOUND = "1e9 s, about 32 years of simulated time, is past the end of any run"

CLOCKS = ("simulated", "wall")
"""``time.clock``: rounds on the simulated clock, or on the wall clock (real replies)."""

POLICY_FIELDS: dict[str, tuple[str, ...]] = {
    "wait-all": (),
    "deadline": ("deadline_s", "late"),
    "over-selection": ("select", "over", "late"),
}
"""The settings of ``time.policy`` each kind takes (``kind`` aside)."""


@dataclass(frozen=True)
class LogNormalLaw:
    """A log-normal law: median x exp(sigma z), z standard normal (sigma 0: the median)."""

    median: float
    sigma: float = 0.0


@dataclass(frozen=True)
class SpeedsConfig:
    """Every client's device (fedram_flwr.clock.speeds): drawn from log-normal laws, or
    FedScale's device-capacity records (a JSON file: id -> {computation, communication})."""

    law: Literal["lognormal", "fedscale"] = "lognormal"
    # lognormal: milliseconds one sample's inference takes; the link's kbit/s.
    compute_ms_per_sample: LogNormalLaw | None = None
    bandwidth_kbps: LogNormalLaw | None = None
    # fedscale: the capacity file; partition k takes record clients[k] (default: the
    # file's ids in ascending order).
    path: str | None = None
    clients: tuple[int, ...] | None = None

    def __post_init__(self) -> None:
        if self.path is not None:  # made absolute at load, like data.root
            object.__setattr__(self, "path", absolute_path(self.path))


@dataclass(frozen=True)
class ClockAvailabilityConfig:
    """Who is available at simulated time t (fedram_flwr.availability.timed)."""

    # rounds: the availability section's oracle, one round per tick_seconds; fedscale: a
    # behaviour trace replayed in seconds; diurnal: p_i(t) = base_i (1 + amplitude
    # cos(2 pi (t - peak_i) / period)), clipped to [0, 1], drawn once per slot.
    law: Literal["rounds", "fedscale", "diurnal"] = "rounds"
    tick_seconds: float = 1.0
    path: str | None = None
    start_time: float = 0.0
    clients: tuple[int, ...] | None = None
    base: tuple[float, ...] | None = None
    amplitude: float = 0.5
    peak_seconds: tuple[float, ...] = (0.0,)
    period_seconds: float = 86400.0
    slot_seconds: float = 60.0

    def __post_init__(self) -> None:
        if self.path is not None:  # made absolute at load, like data.root
            object.__setattr__(self, "path", absolute_path(self.path))


@dataclass(frozen=True)
class RoundPolicyConfig:
    """Which started clients' updates a round aggregates (fedram_flwr.clock.policy).

    ``wait-all``: every started client's (the round lasts as long as its slowest);
    ``deadline``: those that finish within ``deadline_s`` of the round's start;
    ``over-selection``: start up to ceil(``over`` x ``select``) of the available clients,
    use the first ``select`` to finish. ``late``: what becomes of a started client's
    update that is not used: ``drop`` (lost) or ``keep`` (delivered in the round in
    which it arrives, to the algorithms that keep per-client memory)."""

    kind: Literal["wait-all", "deadline", "over-selection"] = "wait-all"
    deadline_s: float | None = None
    late: Literal["drop", "keep"] = "drop"
    select: int | None = None
    over: float = 1.0

    def __post_init__(self) -> None:
        _only_for("time.policy", self, None, self.kind, POLICY_FIELDS, "kind")
        if self.kind == "deadline":
            if self.deadline_s is None:
                raise ScenarioError(
                    "time.policy.deadline_s: required for kind deadline (seconds after the "
                    "round's start, > 0)"
                )
            check_range("time.policy.deadline_s", self.deadline_s, 0.0, None, lo_open=True)
        if self.kind == "over-selection":
            if self.select is None:
                raise ScenarioError(
                    "time.policy.select: required for kind over-selection (the number of "
                    "updates a round uses, >= 1)"
                )
            check_range("time.policy.select", self.select, 1, None)
            check_range("time.policy.over", self.over, 1.0, None)  # <= K: check_clients


@dataclass(frozen=True)
class TimeConfig:
    """The time model: device speeds, availability on a simulated clock and
    the round policy. Left out, a run counts rounds exactly as before. ``clock``:
    ``simulated`` (the server computes when each client finishes from the speeds) or
    ``wall`` (rounds wait for real replies under the policy, ``deadline_s`` in wall
    seconds; who is available is the ``availability:`` oracle's, so ``time.availability``
    is left out and ``time.speeds`` is optional)."""

    speeds: SpeedsConfig = field(default_factory=SpeedsConfig)
    availability: ClockAvailabilityConfig = field(default_factory=ClockAvailabilityConfig)
    policy: RoundPolicyConfig = field(default_factory=RoundPolicyConfig)
    clock: Literal["simulated", "wall"] = "simulated"
    # Each ClientApp takes the time its device would (fedram_flwr.clients.emulate): it
    # sleeps for the modelled computation + communication seconds less the time already
    # spent, counted from the node's start on the message (node) or from the server's
    # creation of it (push: polling and process start-up count too).
    emulate: bool = False
    emulate_from: Literal["node", "push"] = "node"

    def __post_init__(self) -> None:
        sp, av = self.speeds, self.availability
        if self.emulate_from != "node" and not self.emulate:
            raise ScenarioError(
                "time.emulate_from: applies with time.emulate: true only; time.emulate is false"
            )
        if self.emulate and sp == SpeedsConfig():
            raise ScenarioError(
                "time.emulate: there is no time model to emulate; give the devices in "
                "time.speeds (law lognormal with compute_ms_per_sample and bandwidth_kbps, "
                "or law fedscale with a path)"
            )
        if self.clock not in CLOCKS:
            raise ScenarioError(
                f"time.clock: {self.clock!r} is not allowed; allowed values: {', '.join(CLOCKS)}"
            )
        if self.clock == "wall":
            if av != ClockAvailabilityConfig():
                raise ScenarioError(
                    "time.availability: applies to clock simulated only; on the wall clock "
                    "the availability: section's oracle (connected: the nodes really "
                    "connected) says who is available each round"
                )
            if sp == SpeedsConfig():  # no speeds: real devices
                return
        _only_for(
            "time.speeds",
            sp,
            SpeedsConfig(),
            sp.law,
            {
                "lognormal": ("compute_ms_per_sample", "bandwidth_kbps"),
                "fedscale": ("path", "clients"),
            },
        )
        if sp.law == "lognormal":
            for name in ("compute_ms_per_sample", "bandwidth_kbps"):
                law = getattr(sp, name)
                if law is None:
                    raise ScenarioError(
                        f"time.speeds.{name}: required for law lognormal; give "
                        "{median: ..., sigma: ...}"
                    )
                check_range(f"time.speeds.{name}.median", law.median, 0.0, None, lo_open=True)
                check_range(f"time.speeds.{name}.sigma", law.sigma, 0.0, None)
        elif sp.path is None:
            raise ScenarioError("time.speeds.path: required for law fedscale (a JSON file)")
        _only_for(
            "time.availability",
            av,
            ClockAvailabilityConfig(),
            av.law,
            {
                "rounds": ("tick_seconds",),
                "fedscale": ("path", "start_time", "clients"),
                "diurnal": ("base", "amplitude", "peak_seconds", "period_seconds", "slot_seconds"),
            },
        )
        check_range("time.availability.start_time", av.start_time, 0.0, None)
        check_range("time.availability.amplitude", av.amplitude, 0.0, 1.0)
        for name in ("period_seconds", "slot_seconds", "tick_seconds"):
            check_range(
                f"time.availability.{name}",
                getattr(av, name),
                0.0,
                MAX_SIM_SECONDS,
                lo_open=True,
                bound=SIM_SECONDS_BOUND,
            )
        for i, b in enumerate(av.base or ()):
            check_range(f"time.availability.base[{i}]", b, 0.0, 1.0)
        if av.law == "fedscale" and av.path is None:
            raise ScenarioError(
                "time.availability.path: required for law fedscale (a behaviour trace, JSON)"
            )
        if av.law == "diurnal" and not av.base:
            raise ScenarioError(
                "time.availability.base: required for law diurnal; give one probability "
                "in [0, 1] or one per client"
            )

    def check_clients(self, num_clients: int) -> None:
        """Per-client lists hold one value per client (or one for all, where allowed);
        an over-selection that selects at most the ``num_clients`` clients, starting at
        most ``num_clients`` x ``select`` (more would select nobody more)."""
        policy = self.policy
        if policy.kind == "over-selection" and policy.select is not None:
            check_range(
                "time.policy.select",
                policy.select,
                1,
                num_clients,
                bound=f"a round cannot use more than the data.num_clients = {num_clients} clients",
            )
            check_range(
                "time.policy.over",
                policy.over,
                1.0,
                float(num_clients),
                bound=f"over x select past every one of the {num_clients} clients starts no more",
            )
        lists = [
            ("time.speeds.clients", self.speeds.clients, False),
            ("time.availability.clients", self.availability.clients, False),
            ("time.availability.base", self.availability.base, True),
            ("time.availability.peak_seconds", self.availability.peak_seconds, True),
        ]
        for name, values, one_for_all in lists:
            if values is None or len(values) == num_clients or (one_for_all and len(values) == 1):
                continue
            allowed = "one value or one per client" if one_for_all else "one per client"
            raise ScenarioError(
                f"{name}: has {len(values)} entries; give {allowed} "
                f"(data.num_clients = {num_clients})"
            )


def _only_for(
    where: str,
    value: Any,
    defaults: Any,
    law: str,
    owners: Mapping[str, tuple[str, ...]],
    key: str = "law",
) -> None:
    """Refuse a setting given (not its default) that belongs to another ``key`` (law,
    kind) than ``law``; ``defaults`` None: the dataclass's field defaults."""
    if defaults is None:
        defaults = SimpleNamespace(**{f.name: f.default for f in fields(value)})
    for other, names in owners.items():
        for name in names:
            if (
                other != law
                and name not in owners[law]
                and getattr(value, name) != getattr(defaults, name)
            ):
                raise ScenarioError(
                    f"{where}.{name}: applies to {key} {_owners_of(owners, name)} only; "
                    f"{where}.{key} is {law}"
                )


def _owners_of(owners: Mapping[str, tuple[str, ...]], name: str) -> str:
    """The laws (kinds) a setting belongs to, as a message lists them."""
    return ", ".join(k for k, names in owners.items() if name in names)
