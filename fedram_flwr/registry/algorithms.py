"""The algorithms a scenario may name in ``algorithm.name``.

Each algorithm is one line of :data:`ALGORITHMS`, an :class:`AlgorithmSpec`: its name,
its Flower strategy classes (legacy, then Message API: the same core), which hidden
oracle parameters it reads when run oracle-informed, and what a scenario adds beyond
the core (:class:`~fedram_flwr.registry.params.OracleInformed`). Its
``algorithm.params`` (fields, types, defaults, ranges, docs) are derived from the core's
declarations (:mod:`fedram_flwr.strategies.hyper`); nothing here retypes them. Its
clients' local objective is the client side's
(:func:`fedram_flwr.clients.train_blocks.objective_of`: plain local SGD unless an objective
names the algorithm), which a node finds without importing the strategies.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from fedram_flwr import strategies as st
from fedram_flwr.availability.specs.oracles import MARKOV
from fedram_flwr.message_api import algorithms as ma
from fedram_flwr.message_api.fedbuff import FedBuff
from fedram_flwr.registry.algorithms_rc_fl import QFFLParams, RFedFairChecks
from fedram_flwr.registry.params import OracleInformed
from fedram_flwr.registry.specs import AlgorithmSpec, AsyncAlgorithmSpec, Hidden
from fedram_flwr.strategies.fedbuff import FedBuffCore


# ------------------------------------------- what scenarios add beyond the cores
@dataclass(frozen=True)
class F3ASTInformed(OracleInformed):
    """F3AST reads the oracle's pi only with ``rate: ca-fed``; its own estimate reads
    nothing hidden, whatever ``availability`` says."""

    @property
    def oracle_informed(self) -> bool:
        return super().oracle_informed and getattr(self, "rate") == "ca-fed"


# ------------------------------------------------------------------ the table
PI: frozenset[Hidden] = frozenset({"pi"})
ORACLE = OracleInformed  # the families that share the ``availability`` switch

ALGORITHMS: dict[str, AlgorithmSpec[Any]] = {
    spec.name: spec
    for spec in (
        AlgorithmSpec("fedavg", st.FedAvg, ma.FedAvg),
        AlgorithmSpec("fed-cvar-avg", st.FedCVaRAvg, ma.FedCVaRAvg),
        # CA-Fed (Rodio et al. 2023) and its baselines
        AlgorithmSpec("ca-fed", st.CAFed, ma.CAFed, MARKOV, ORACLE),
        AlgorithmSpec("unbiased", st.Unbiased, ma.Unbiased, PI, ORACLE),
        AlgorithmSpec("more-available", st.MoreAvailable, ma.MoreAvailable, PI, ORACLE),
        AlgorithmSpec("adafed", st.AdaFed, ma.AdaFed, PI, ORACLE),
        AlgorithmSpec("f3ast", st.F3AST, ma.F3AST, PI, F3ASTInformed),
        # FedAR (Jiang et al. 2024) and its baselines
        AlgorithmSpec("fedar", st.FedAR, ma.FedAR, scenario=ORACLE),
        AlgorithmSpec("mifa", st.MIFA, ma.MIFA, scenario=ORACLE),
        AlgorithmSpec("fedvarp", st.FedVARP, ma.FedVARP, scenario=ORACLE),
        AlgorithmSpec("fedstale", st.FedStale, ma.FedStale, PI, ORACLE),
        AlgorithmSpec("fedstale-active", st.FedStaleActive, ma.FedStaleActive, scenario=ORACLE),
        AlgorithmSpec("fedavg-all", st.FedAvgAll, ma.FedAvgAll, scenario=ORACLE),
        AlgorithmSpec("fedawe", st.FedAWE, ma.FedAWE, scenario=ORACLE),
        AlgorithmSpec("fedavg-is", st.FedAvgIS, ma.FedAvgIS, PI, ORACLE),
        AlgorithmSpec("fedavg-s", st.FedAvgSampled, ma.FedAvgSampled, scenario=ORACLE),
        AlgorithmSpec("fedau", st.FedAU, ma.FedAU, scenario=ORACLE),
        AlgorithmSpec("scaffold", st.Scaffold, ma.Scaffold, scenario=ORACLE),
        # Debiasing FedAvg (Sun et al. 2025), Amplified SCAFFOLD (Crawshaw and Liu 2024)
        AlgorithmSpec("debiasing-fedavg", st.DebiasingFedAvg, ma.DebiasingFedAvg, PI, ORACLE),
        AlgorithmSpec(
            "amplified-scaffold",
            st.AmplifiedScaffold,
            ma.AmplifiedScaffold,
            scenario=ORACLE,
        ),
        # FOCUS (Ying, Li, Yang 2025): push-pull gradient tracking
        AlgorithmSpec("focus", st.Focus, ma.Focus),
        # RC-FL (rFedFair) and its baselines
        AlgorithmSpec("rfedfair", st.RFedFair, ma.RFedFair, scenario=RFedFairChecks),
        AlgorithmSpec("afl", st.AFL, ma.AFL),
        AlgorithmSpec("qffl", st.QFFL, ma.QFFL, params=QFFLParams),
    )
}


FEDBUFF_LEFT = (
    "Flower's legacy API runs it with a server loop of its own "
    "(fedram_flwr.engines.fedbuff_server.FedBuffServer: fedram run --api legacy, any engine), "
    "the Message API with its FedBuff strategy (--api message)"
)


ASYNC_ALGORITHMS: dict[str, AsyncAlgorithmSpec[Any]] = {
    spec.name: spec
    for spec in (
        # FedBuff (Nguyen et al., AISTATS 2022): buffered asynchronous aggregation
        AsyncAlgorithmSpec("fedbuff", FedBuffCore, FedBuff, FEDBUFF_LEFT),
    )
}
"""The asynchronous algorithms: their legacy-API server loop and their Message-API strategy,
on any engine; no round-based legacy Flower strategy."""
