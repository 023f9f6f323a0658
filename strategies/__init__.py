"""Server strategies (imported as ``fedram_flwr.strategies``).

One module per algorithm family: pure numpy math first, then its core (a frozen state
value and pure functions over it, :mod:`~fedram_flwr.strategies.core`), then the thin
Flower Strategy over the core (one base, :mod:`~fedram_flwr.strategies.base`).
"""

from fedram_flwr.strategies.afl import AFL
from fedram_flwr.strategies.amplified_scaffold import AmplifiedScaffold
from fedram_flwr.strategies.availability_baselines import F3AST, AdaFed, MoreAvailable, Unbiased
from fedram_flwr.strategies.ca_fed import CAFed
from fedram_flwr.strategies.debiasing_fedavg import DebiasingFedAvg
from fedram_flwr.strategies.fed_cvar_avg import (
    FedCVaRAvg,
    cvar_gradient_weights,
    cvar_local_objective,
)
from fedram_flwr.strategies.fedar import FedAR
from fedram_flwr.strategies.fedau import FedAU
from fedram_flwr.strategies.fedavg import FedAvg
from fedram_flwr.strategies.fedawe import FedAWE
from fedram_flwr.strategies.fedstale import FedStale, FedStaleActive
from fedram_flwr.strategies.focus import Focus
from fedram_flwr.strategies.participation import FedAvgAll, FedAvgIS, FedAvgSampled
from fedram_flwr.strategies.qffl import QFFL
from fedram_flwr.strategies.rc_fl import RFedFair
from fedram_flwr.strategies.scaffold import Scaffold
from fedram_flwr.strategies.stale_updates import MIFA, FedVARP

__all__ = [
    "AFL",
    "AdaFed",
    "AmplifiedScaffold",
    "CAFed",
    "DebiasingFedAvg",
    "F3AST",
    "FedAR",
    "FedAU",
    "FedAvg",
    "FedAvgAll",
    "FedAWE",
    "FedAvgIS",
    "FedAvgSampled",
    "FedCVaRAvg",
    "FedStale",
    "FedStaleActive",
    "FedVARP",
    "Focus",
    "MIFA",
    "MoreAvailable",
    "QFFL",
    "RFedFair",
    "Scaffold",
    "Unbiased",
    "cvar_gradient_weights",
    "cvar_local_objective",
]
