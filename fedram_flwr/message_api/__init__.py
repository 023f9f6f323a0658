"""Flower's Message API (``flwr.serverapp``): every algorithm as a strategy.

Also availability for any strategy (:func:`with_availability`), its rounds on the wall
clock (:func:`with_wall_clock`: a deadline, over-selection, late updates), the client side of the
partition-id contract (:func:`partition_id_query`) and the reply order of a round
(:func:`ordered_replies`). Each strategy here runs the same core, declared once, as its
legacy adapter in :mod:`fedram_flwr.strategies`; asynchronous FedBuff (:class:`FedBuff`:
push and pull of messages, no rounds) runs the core and event loop of its in-process run.
"""

from fedram_flwr.message_api.algorithms import (
    AFL,
    F3AST,
    MIFA,
    QFFL,
    AdaFed,
    AmplifiedScaffold,
    CAFed,
    DebiasingFedAvg,
    FedAR,
    FedAU,
    FedAvg,
    FedAvgAll,
    FedAvgIS,
    FedAvgSampled,
    FedCVaRAvg,
    FedStale,
    FedStaleActive,
    FedVARP,
    Focus,
    MoreAvailable,
    Scaffold,
    Unbiased,
)
from fedram_flwr.message_api.algorithms_per_node import FedAWE, RFedFair
from fedram_flwr.message_api.availability import AvailabilityStrategy, with_availability
from fedram_flwr.message_api.fedbuff import FedBuff
from fedram_flwr.message_api.partitions import partition_id_query
from fedram_flwr.message_api.round_guard import ordered_replies
from fedram_flwr.message_api.strategy import CoreMessageStrategy
from fedram_flwr.message_api.wall import WallClockAvailability, with_wall_clock

__all__ = [
    "AFL",
    "AdaFed",
    "AmplifiedScaffold",
    "AvailabilityStrategy",
    "CAFed",
    "CoreMessageStrategy",
    "DebiasingFedAvg",
    "F3AST",
    "FedAR",
    "FedAU",
    "FedAvg",
    "FedAvgAll",
    "FedAWE",
    "FedAvgIS",
    "FedBuff",
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
    "WallClockAvailability",
    "ordered_replies",
    "partition_id_query",
    "with_availability",
    "with_wall_clock",
]
