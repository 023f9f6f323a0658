"""FedAWE's p_i from each client's labels, for the oracles that offer it.

The FedAWE paper's rule p_i = <nu_i, phi> (Xiang et al., NeurIPS 2024, App. J.3) on a
scenario's data, for every oracle that offers it: the ``nonstationary`` oracle's default
base p_i, the ``bernoulli`` oracle's ``p: labels``. nu_i is the class distribution of
client i's training labels, [phi]_c ~ U(0, Phi_c) from the ``fedawe-phi`` stream of the
seed (one phi per seed, whichever oracle asks), Phi_c = ``phi_max``.

The rule reads the data partition when the oracle is built, with no rare clients: a
partition that gives labels by availability (the rare-pattern split) would make it
circular, and :func:`check_label_rule` refuses it.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from fedram_flwr.availability.nonstationary import default_phi_max, fedawe_base_p, fedawe_phi
from fedram_flwr.availability.specs.checks import as_scenario_error, check_length
from fedram_flwr.data import load_federated_data
from fedram_flwr.rng import stream
from fedram_flwr.scenario.config import Scenario, ScenarioError
from fedram_flwr.scenario.schema import check_range


def check_label_rule(scenario: Scenario, phi_max: Sequence[float] | None) -> None:
    """Check ``phi_max`` and the partition the rule reads.

    Each ``phi_max`` entry in [0, 1]; a partition that does not depend on availability
    (the rule reads each client's labels before the rare clients are known).
    """
    for i, v in enumerate(phi_max or ()):
        check_range(f"availability.params.phi_max[{i}]", v, 0.0, 1.0)
    d = scenario.data
    rare_split = d.partition == "rare-patterns" and d.client_classes is None
    if rare_split and d.dataset != "synthetic" and d.num_rare_clients:
        raise ScenarioError(
            "availability.params.p: the paper's rule p_i = <nu_i, phi> reads each "
            "client's labels, but the rare-pattern split gives labels by availability; "
            "give p (one per client), data.client_classes, data.partition: dirichlet "
            "or two-classes, or data.frequent_fraction: 1"
        )


def label_p(scenario: Scenario, seed: int, phi_max: Sequence[float] | None) -> np.ndarray:
    """Return each client's p_i from its labels.

    Each client's p_i = <nu_i, phi> on the data of ``seed``, phi from the
    ``fedawe-phi`` stream with Phi_c = ``phi_max`` (default :func:`default_phi_max`;
    its length is checked against the data's classes here).
    """
    data = load_federated_data(scenario.data, (), seed)
    c = data.num_classes
    check_length("availability.params.phi_max", phi_max, c, "the number of classes")
    phi = fedawe_phi(default_phi_max(c) if phi_max is None else phi_max, stream("fedawe-phi", seed))
    counts = np.array([np.bincount(y, minlength=c) for y in data.client_y])
    return as_scenario_error(fedawe_base_p, counts, phi)
