"""Hyper-parameters declared once, on the algorithm's core.

Each hyper-parameter is one field of its core's frozen dataclass, declared with
:func:`hyper`: its name, default (the paper's value), allowed range or values and a
one-line doc. Everything else is derived from that declaration:

- the core checks its values when built (:func:`check_hypers`; errors name the field);
- both Flower faces take the same keyword arguments (:func:`core_parameters`: the
  legacy :class:`~fedram_flwr.strategies.base.CoreStrategy` and the Message-API
  :class:`~fedram_flwr.message_api.strategy.CoreMessageStrategy` build their signature
  and the ``Parameters`` section of their docstring from it, :func:`make_core` builds
  the core from the keyword arguments);
- the scenario's ``algorithm.params`` (:mod:`fedram_flwr.registry.specs`), their checks
  (errors as ``algorithm.params.<field>``) and the parameter tables of ``docs/API.md``.

A field whose value comes from the run rather than from the scenario (the number of
clients, the clients' learning rate, the data shares, the oracle's hidden law) names
it with ``run=`` (a :data:`RunValue`); the registry supplies it. Nothing here imports
Flower.
"""

from __future__ import annotations

import inspect
import types
import typing
from dataclasses import MISSING, Field, dataclass, field, fields
from typing import Any, Literal

from fedram_flwr.scenario.schema import range_problem, range_text

RunValue = Literal[
    "num-clients", "training-lr", "seed", "data-shares", "known-pi", "known-lam", "known-p"
]
"""What the run gives a core (:mod:`fedram_flwr.registry.specs` supplies each):
``num-clients`` N (``data.num_clients``), ``training-lr`` the clients' step size eta_0
(``training.lr``), ``seed`` the scenario seed, ``data-shares`` each client's share of
the training samples m_i / m; and, only when the scenario runs the algorithm
oracle-informed (``algorithm.params.availability: oracle``), the oracle's hidden law:
``known-pi`` each client's long-run availability pi_i, ``known-lam`` its Markov chain's
lambda_i, ``known-p`` p_i (per round where the law changes with the round)."""

MODEL_BOUND = ("like",)
"""Core fields set from the model at start (:meth:`Core.for_model`), not hyper-parameters."""

_KEY = "fedram-hyper"


@dataclass(frozen=True)
class Hyper:
    """What is declared of one hyper-parameter beside its name and default.

    Parameters
    ----------
    doc : str
        One line: what it is, with the paper's symbol and equation.
    lo, hi : float or str, optional
        The allowed range (``None``: unbounded); a bound may name a :data:`RunValue`
        (``"num-clients"``), resolved by the registry against the scenario.
    lo_open : bool
        ``(lo, hi]`` instead of ``[lo, hi]``.
    choices : tuple of str
        The allowed values of a named option (empty: any value of its type).
    run : RunValue, optional
        The value comes from the run, not from the scenario's params.
    run_default : RunValue, optional
        A scenario may give the value; when it does not, the run's value is used.
    """

    doc: str
    lo: float | str | None = None
    hi: float | str | None = None
    lo_open: bool = False
    choices: tuple[str, ...] = ()
    run: RunValue | None = None
    run_default: RunValue | None = None

    def allowed(self) -> str:
        """Return the allowed values as the docs and errors write them: ``(0, 1]``, ``a, b``.

        Returns
        -------
        str
            The choices, comma-separated, or the range (``[lo, hi]``, ``(lo, inf)``...);
            empty when anything is allowed.
        """
        if self.choices:
            return ", ".join(self.choices)
        if self.lo is None and self.hi is None:
            return ""
        return range_text(self.lo, self.hi, lo_open=self.lo_open)

    def problem(self, name: str, value: Any, bounds: dict[str, float] | None = None) -> str | None:
        """Say why ``value`` is not allowed, naming ``name``.

        Parameters
        ----------
        name : str
            The field's name, as the message starts (``name[i]`` for an element).
        value : Any
            The value; each element of a tuple, list or numpy array is checked. NaN is
            outside any range; ``None`` and strings pass a range.
        bounds : dict of str to float, optional
            The values of the :data:`RunValue` bounds; a bound it does not hold is
            skipped.

        Returns
        -------
        str or None
            The reason, or ``None`` when the value is allowed.
        """
        if hasattr(value, "tolist") and not isinstance(value, int | float):  # numpy
            value = value.tolist()
        if isinstance(value, tuple | list):
            for i, v in enumerate(value):
                if why := self.problem(f"{name}[{i}]", v, bounds):
                    return why
            return None
        if self.choices:  # whatever its type: a callable where a name is due is refused
            if value not in self.choices:
                return f"{name}: {value!r} is not one of the allowed values: {self.allowed()}"
            return None
        if value is None or not isinstance(value, int | float | str):
            return None
        if isinstance(value, str):
            return None
        lo, hi = (_bound(b, bounds or {}) for b in (self.lo, self.hi))
        return range_problem(name, value, lo, hi, lo_open=self.lo_open)


def _bound(bound: float | str | None, bounds: dict[str, float]) -> float | None:
    if isinstance(bound, str):
        return bounds.get(bound)
    return bound


def hyper(
    default: Any = MISSING,
    *,
    doc: str,
    lo: float | str | None = None,
    hi: float | str | None = None,
    lo_open: bool = False,
    choices: tuple[str, ...] = (),
    run: RunValue | None = None,
    run_default: RunValue | None = None,
) -> Any:
    """Declare a core's hyper-parameter: a dataclass field holding its :class:`Hyper`.

    Parameters
    ----------
    default : Any, optional
        The default (the paper's value); none: the argument is required.
    doc, lo, hi, lo_open, choices, run, run_default
        The declaration: see :class:`Hyper`.

    Returns
    -------
    dataclasses.Field
        The field, with the declaration in its metadata.
    """
    meta = {_KEY: Hyper(doc, lo, hi, lo_open, tuple(choices), run, run_default)}
    return field(default=default, metadata=meta)


def declared(core_type: type) -> list[tuple[Field, Hyper]]:
    """Return the hyper-parameters of a core class, in field order.

    Parameters
    ----------
    core_type : type
        A core dataclass class.

    Returns
    -------
    list of (dataclasses.Field, Hyper)
        Every init field but :data:`MODEL_BOUND`, with its declaration.

    Raises
    ------
    TypeError
        If an init field is not declared with :func:`hyper` (nothing undeclared reaches
        a constructor).
    """
    out = []
    for f in fields(core_type):
        if not f.init or f.name in MODEL_BOUND:
            continue
        if _KEY not in f.metadata:
            raise TypeError(
                f"{core_type.__name__}.{f.name}: declare it with strategies.hyper.hyper(...)"
            )
        out.append((f, f.metadata[_KEY]))
    return out


def is_required(f: Field) -> bool:
    """Return whether a field has no default."""
    return f.default is MISSING and f.default_factory is MISSING


def check_hypers(core: Any) -> None:
    """Raise ``ValueError`` naming the first field of ``core`` outside its declaration."""
    for f, h in declared(type(core)):
        if why := h.problem(f.name, getattr(core, f.name)):
            raise ValueError(why)


def make_core(core_type: type, params: dict[str, Any], strategy: str, others: str) -> Any:
    """Build ``core_type(**params)``, naming unknown or missing arguments.

    Parameters
    ----------
    core_type : type
        A core dataclass class.
    params : dict of str to Any
        Its hyper-parameters by name.
    strategy : str
        The strategy's name, for the message.
    others : str
        What else the strategy takes, for the message.

    Returns
    -------
    Any
        The core (checked by its ``__post_init__``).

    Raises
    ------
    TypeError
        If an argument is unknown (the allowed ones are named) or a required one is
        missing.
    """
    names = [f.name for f, _ in declared(core_type)]
    if unknown := sorted(set(params) - set(names)):
        raise TypeError(f"{strategy}: unknown argument(s) {unknown}; its own are {names}, {others}")
    required = [f.name for f, _ in declared(core_type) if is_required(f)]
    if missing := [n for n in required if n not in params]:
        raise TypeError(f"{strategy}: missing required argument(s) {missing}")
    return core_type(**params)


def core_parameters(core_type: type) -> list[inspect.Parameter]:
    """Return the core's hyper-parameters as a constructor's keyword-only parameters.

    Parameters
    ----------
    core_type : type
        A core dataclass class.

    Returns
    -------
    list of inspect.Parameter
        Keyword-only, with their defaults, the required ones first.
    """
    kw, empty = inspect.Parameter.KEYWORD_ONLY, inspect.Parameter.empty
    params = [
        inspect.Parameter(f.name, kw, default=empty if is_required(f) else f.default)
        for f, _ in declared(core_type)
    ]
    return sorted(params, key=lambda p: p.default is not empty)


def type_name(core_type: type, name: str) -> str:
    """Return the declared type of field ``name`` of ``core_type`` as the docs write it."""
    hint = typing.get_type_hints(core_type).get(name, Any)
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        return " or ".join(_name(a) for a in typing.get_args(hint))
    return _name(hint)


def _name(hint: Any) -> str:
    if hint is type(None):
        return "None"
    if typing.get_origin(hint) is None and hasattr(hint, "__name__"):
        return hint.__name__
    return str(hint).replace("typing.", "").replace("numpy.", "np.").replace("collections.abc.", "")


def parameters_doc(core_type: type, leading: str = "", trailing: str = "") -> str:
    """Write the numpy-style ``Parameters`` section of a core's hyper-parameters.

    One entry per declared field: type, default (or ``required``), doc, allowed values
    and where the run gives it.

    Parameters
    ----------
    core_type : type
        A core dataclass class.
    leading, trailing : str
        Entries before and after the hyper-parameters, already formatted (may be empty).

    Returns
    -------
    str
        The section, heading and underline included, unindented.
    """
    lines = ["Parameters", "----------"]
    if leading:
        lines.append(leading.rstrip("\n"))
    for f, h in declared(core_type):
        default = "required" if is_required(f) else f"default {f.default!r}"
        lines.append(f"{f.name} : {type_name(core_type, f.name)}, {default}")
        where = f"; allowed: {h.allowed()}" if h.allowed() else ""
        given = f" Given by the run ({h.run})." if h.run else ""
        if h.run_default:
            given = f" Scenarios default to the run's {h.run_default}."
        lines.append(f"    {h.doc}{where}.{given}")
    if trailing:
        lines.append(trailing.rstrip("\n"))
    return "\n".join(lines)


def with_parameters_doc(doc: str | None, section: str) -> str:
    """Append ``section`` to a class docstring.

    Parameters
    ----------
    doc : str or None
        The class docstring (``None``: empty).
    section : str
        An unindented section (:func:`parameters_doc`).

    Returns
    -------
    str
        ``doc``, cleaned by ``inspect.cleandoc`` (so ``help()`` and ``inspect.getdoc``
        show the section aligned with its body), then a blank line and ``section``.
    """
    doc = inspect.cleandoc(doc or "")
    return f"{doc}\n\n{section}\n"


def server_lr_hyper() -> Any:
    """Declare the global (server) learning rate eta_g once for every core that takes it.

    x_{t+1} = x_t + eta_g d_t, d_t the rule's own aggregated update (the FedAU and FedAWE
    authors' code gives every baseline one; 1 leaves each rule as its paper states it,
    bit for bit). A :func:`hyper` field: default 1, range (0, inf).
    """
    return hyper(
        1.0, doc="eta_g, the global learning rate on the aggregated update", lo=0.0, lo_open=True
    )


def num_clients_hyper() -> Any:
    """Declare N once for every core that keeps something per client (given by the run)."""
    return hyper(doc="N, the number of clients (partition ids 0..N-1)", lo=1, run="num-clients")
