"""The RC-FL client (clients/rc_fl.py): its local steps on f^{mu,i} and eta (RC-FL
Sec. 5), and its check of alpha_i against p_i."""

from __future__ import annotations

import numpy as np
import pytest

from fedram_flwr.clients.models import get_weights
from fedram_flwr.engines.experiment import Experiment
from fedram_flwr.registry import scenario_from_dict


def test_rcfl_client_with_alpha_one_and_eta_far_below_is_the_erm_client(scenario_dict) -> None:
    """alpha_i = 1 and f_i - eta >> mu: d f^{mu,i} / d f_i is exactly 1 and eta's
    gradient 0, so the local steps are FedAvg's, bit for bit."""
    scenario_dict.update(availability={"oracle": "bernoulli", "params": {"p_min": 1.0}})
    scenario_dict["algorithm"] = {"name": "rfedfair", "params": {"alpha": [1.0]}}
    exp = Experiment(scenario_from_dict(scenario_dict), 0)
    theta = get_weights(exp.new_model())
    config = {"server-round": 1, "rcfl-alpha": 1.0, "rcfl-p": 1 / 3, "rcfl-mu": 1e-3, "lr-eta": 0.1}
    rcfl, n, metrics = exp.client(1).fit([*theta, np.array([-1e3])], config)
    scenario_dict["algorithm"] = {"name": "fedavg"}
    erm, _, _ = Experiment(scenario_from_dict(scenario_dict), 0).client(1).fit(theta, config)
    for a, b in zip(rcfl[:-1], erm, strict=True):
        np.testing.assert_array_equal(a, b)
    assert rcfl[-1][0] == -1e3 and metrics["eta"] == -1e3
    with pytest.raises(ValueError, match=r"alpha of client 1.*not in \[0.4, 1\]"):
        exp.client(1).fit([*theta, np.zeros(1)], {**config, "rcfl-alpha": 0.3, "rcfl-p": 0.4})
