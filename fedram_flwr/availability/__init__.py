"""Availability: who participates in each round, decided by an oracle, never the server.

- :mod:`.laws`: the pure laws, numpy only: (seed, round) -> active ids (RAM, cyclic
  windows and their groups, the connected subsample) and :class:`HiddenLaw`;
  :mod:`.markov`: the Markov and Bernoulli chains and the papers' generators of their
  (pi, lambda); :mod:`.separation`: minimum-separation participation;
- :mod:`.manager`: the legacy Flower ClientManager base every oracle shares (partition
  ids, bounded waits, the round counter) and :class:`AvailabilityError`;
- :mod:`.oracles`: ``ram``, ``bernoulli``, ``markov``/``clustered``, ``cyclic``,
  ``trace``: thin wrappers over the laws that emulate availability;
- :mod:`.separation`: minimum-separation participation, an R-order Markov chain
  (Debiasing FedAvg's law, ``min-separation``);
- :mod:`.nonstationary`: FedAWE's non-stationary Bernoulli law p_i^t = p_i f_i(t)
  (``nonstationary``);
- :mod:`.traces`: reading and writing recorded traces; :mod:`.fedscale`: FedScale's
  client behaviour traces (wall-clock intervals) mapped to rounds;
- :mod:`.timed`: availability on the simulated clock (who is available at t seconds):
  traces in seconds, a diurnal law, any round-indexed oracle one round per tick;
- :mod:`.connected`: the Deployment Engine's physical availability;
- :mod:`.specs`: the oracle specs a scenario names (``ORACLES``; a node's data split reads
  them), re-exported by :mod:`fedram_flwr.registry`; this package does not import it.
"""

from fedram_flwr.availability.connected import ConnectedClientManager, ReportingProxy
from fedram_flwr.availability.fedscale import fedscale_matrix, read_fedscale
from fedram_flwr.availability.laws import (
    HiddenLaw,
    connected_sample,
    cyclic_active,
    evenly_spread_phases,
    group_phases,
    ram_probabilities,
    ram_relay,
)
from fedram_flwr.availability.manager import AvailabilityError, OracleClientManager
from fedram_flwr.availability.markov import (
    MarkovChains,
    ca_fed_cluster_law,
    ca_fed_markov_law,
    check_markov_law,
    contiguous_clusters,
    fedar_spread,
    label_permutation,
    markov_activation,
    markov_lambda_min,
    markov_step,
)
from fedram_flwr.availability.nonstationary import (
    DYNAMICS,
    NonStationaryClientManager,
    NonStationaryLaw,
    default_phi_max,
    fedawe_base_p,
    fedawe_f,
    fedawe_phi,
)
from fedram_flwr.availability.oracles import (
    BernoulliClientManager,
    CyclicClientManager,
    MarkovClientManager,
    RandomAccessClientManager,
    TraceClientManager,
)
from fedram_flwr.availability.separation import (
    MinSeparationClientManager,
    SeparationChain,
    stationary_participation,
)
from fedram_flwr.availability.timed import (
    AvailableAt,
    DiurnalLaw,
    RoundTicks,
    TraceAvailability,
    clock_availability,
    fedscale_is_active,
)
from fedram_flwr.availability.traces import read_trace, write_trace
from fedram_flwr.protocol import PARTITION_ID

__all__ = [
    "DYNAMICS",
    "PARTITION_ID",
    "AvailabilityError",
    "AvailableAt",
    "BernoulliClientManager",
    "ConnectedClientManager",
    "CyclicClientManager",
    "DiurnalLaw",
    "HiddenLaw",
    "MarkovChains",
    "MarkovClientManager",
    "MinSeparationClientManager",
    "NonStationaryClientManager",
    "NonStationaryLaw",
    "OracleClientManager",
    "RandomAccessClientManager",
    "ReportingProxy",
    "SeparationChain",
    "RoundTicks",
    "TraceAvailability",
    "TraceClientManager",
    "ca_fed_cluster_law",
    "ca_fed_markov_law",
    "check_markov_law",
    "clock_availability",
    "connected_sample",
    "contiguous_clusters",
    "cyclic_active",
    "default_phi_max",
    "evenly_spread_phases",
    "fedar_spread",
    "fedawe_base_p",
    "fedawe_f",
    "fedawe_phi",
    "fedscale_is_active",
    "fedscale_matrix",
    "group_phases",
    "label_permutation",
    "markov_activation",
    "markov_lambda_min",
    "markov_step",
    "ram_probabilities",
    "ram_relay",
    "read_fedscale",
    "read_trace",
    "stationary_participation",
    "write_trace",
]
