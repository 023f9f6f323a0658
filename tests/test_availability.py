"""The Random Access Model: relay frequencies follow rho, draws replay from
(seed, round), and the ClientManager relays the RAM's clients whatever it is asked."""

from __future__ import annotations

import numpy as np
import pytest
from flwr.client import NumPyClient
from flwr.common import Context, GetPropertiesIns
from scipy import stats

from fedram_flwr.availability import (
    PARTITION_ID,
    AvailabilityError,
    RandomAccessClientManager,
    ram_probabilities,
    ram_relay,
)
from fedram_flwr.engines import InProcessClientProxy, node_context
from fedram_flwr.registry import ram_rare_clients, ram_rho


# -------------------------------------------------------------------- ram_relay
def test_relay_frequencies_match_rho() -> None:
    rho = np.array([0.4, 0.25, 0.15, 0.1, 0.06, 0.03, 0.01])
    rounds = 20_000
    draws = [ram_relay(rho, 1, seed=123, server_round=r) for r in range(1, rounds + 1)]
    assert all(len(d) == 1 for d in draws)
    counts = np.bincount([d[0] for d in draws], minlength=rho.size)
    result = stats.chisquare(counts, f_exp=rounds * rho)
    assert result.pvalue > 1e-3, (counts, rounds * rho)
    # The rarest user (rho = 0.01) is relayed about 200 times, not never.
    assert 100 < counts[-1] < 300


def test_relay_never_picks_zero_probability_client() -> None:
    rho = np.array([0.5, 0.0, 0.5])
    picked = {ram_relay(rho, 1, 0, r)[0] for r in range(1, 500)}
    assert picked == {0, 2}


def test_relay_several_clients_are_distinct() -> None:
    rho = np.array([0.7, 0.1, 0.1, 0.05, 0.05])
    seen = np.zeros(5, int)
    for r in range(1, 2001):
        ids = ram_relay(rho, 3, seed=5, server_round=r)
        assert len(ids) == 3 and len(set(ids)) == 3
        assert ids == sorted(ids) and all(0 <= i < 5 for i in ids)
        seen[ids] += 1
    assert np.all(seen > 0)
    # Every client is in the draw when m = K.
    assert ram_relay(rho, 5, 0, 1) == [0, 1, 2, 3, 4]


def test_relay_is_replayable() -> None:
    rho = np.full(10, 0.1)
    first = [ram_relay(rho, 2, seed=1, server_round=r) for r in range(1, 51)]
    again = [ram_relay(rho, 2, seed=1, server_round=r) for r in range(1, 51)]
    assert first == again
    # Order of the calls does not matter: a draw is a function of (seed, round) only.
    assert ram_relay(rho, 2, 1, 37) == first[36]
    other_seed = [ram_relay(rho, 2, seed=2, server_round=r) for r in range(1, 51)]
    assert other_seed != first
    # Rounds are not all the same draw.
    assert len({tuple(d) for d in first}) > 10


# ----------------------------------------------------------- ram_probabilities
RARE_RHO = (0.0107, 0.0078, 0.0053)  # Table 1 of the paper


def test_ram_probabilities_with_pinned_rare_users() -> None:
    rho = ram_probabilities(30, 3, np.random.default_rng(0), RARE_RHO)
    assert rho.shape == (30,)
    assert rho.sum() == pytest.approx(1.0, abs=1e-12)
    assert rho[-3:].tolist() == list(RARE_RHO)
    assert np.all(rho[:27] > 0.0107)
    assert np.all(np.diff(rho) <= 0)  # sorted, most likely first


def test_ram_probabilities_rare_rho_order_does_not_matter() -> None:
    a = ram_probabilities(30, 3, np.random.default_rng(4), (0.0053, 0.0107, 0.0078))
    b = ram_probabilities(30, 3, np.random.default_rng(4), RARE_RHO)
    assert np.array_equal(a, b)


def test_ram_probabilities_uniform_law() -> None:
    rho = ram_probabilities(30, 3, np.random.default_rng(0))
    assert rho.sum() == pytest.approx(1.0, abs=1e-12)
    assert np.all(rho > 0) and np.all(np.diff(rho) <= 0)
    assert not np.allclose(rho, rho[0])
    again = ram_probabilities(30, 3, np.random.default_rng(0))
    assert np.array_equal(rho, again)


@pytest.mark.parametrize(
    "rare_rho",
    [
        (0.01, 0.01),  # two values for three rare users
        (0.05, 0.01, 0.01),  # 27 x 0.05 + 0.07 > 1: the frequent users cannot all be above
    ],
)
def test_ram_probabilities_rejects_bad_rare_rho(rare_rho) -> None:
    with pytest.raises(ValueError, match=r"availability\.params\.rare_rho"):
        ram_probabilities(30, 3, np.random.default_rng(0), rare_rho)


def test_registry_rare_clients_are_least_likely(tiny_scenario) -> None:
    s = tiny_scenario.with_overrides(
        {
            "data.num_clients": 30,
            "data.client_classes": None,
            "data.frequent_fraction": 0.9,
            "availability.params": {"rare_rho": list(RARE_RHO)},
        }
    )
    rho = ram_rho(s, seed=0)
    assert rho[-3:].tolist() == list(RARE_RHO)
    assert ram_rare_clients(s, seed=0) == (27, 28, 29)
    assert not np.array_equal(rho, ram_rho(s, seed=1))  # the frequent law depends on the seed


# -------------------------------------------------- RandomAccessClientManager
class PropertiesClient(NumPyClient):
    def __init__(self, partition_id: int) -> None:
        self.partition_id = partition_id

    def get_properties(self, config):
        return {PARTITION_ID: self.partition_id}


def client_fn(context: Context):
    return PropertiesClient(int(context.node_config["partition-id"])).to_client()


def register_clients(manager: RandomAccessClientManager, k: int) -> None:
    # Node ids unrelated to partition ids (Flower's engines use random node ids).
    for pid in reversed(range(k)):
        cid = str(1_000_003 * (pid + 7) % 99_991)
        manager.register(InProcessClientProxy(cid, client_fn, node_context(pid, k, {})))


def partition_of(proxy) -> int:
    res = proxy.get_properties(GetPropertiesIns(config={}), timeout=None, group_id=None)
    return int(res.properties[PARTITION_ID])


@pytest.mark.parametrize("m", [1, 2])
def test_manager_relays_ram_draws(m: int) -> None:
    rho = [0.3, 0.25, 0.2, 0.15, 0.1]
    manager = RandomAccessClientManager(rho, seed=11, clients_per_round=m, wait_timeout=5)
    register_clients(manager, 5)
    assert manager.num_available() == 5
    for r, asked in zip((1, 2, 3), (5, 1, 100)):
        proxies = manager.sample(num_clients=asked, min_num_clients=asked)
        assert manager.round == r
        assert len(proxies) == m  # the number asked for is ignored
        assert [partition_of(p) for p in proxies] == ram_relay(np.array(rho), m, 11, r)
        assert manager.draw(r) == ram_relay(np.array(rho), m, 11, r)


def test_manager_rho_is_normalised_copy() -> None:
    manager = RandomAccessClientManager([0.5, 0.5], seed=0)
    rho = manager.rho
    rho[0] = 7.0
    assert manager.rho.tolist() == [0.5, 0.5]


@pytest.mark.parametrize("rho", [[0.5, 0.4, 0.2], [0.9, 0.2, -0.1], [0.3, 0.3]])
def test_manager_rejects_invalid_rho(rho) -> None:
    with pytest.raises(ValueError, match=r"availability\.params\.rho.*sum to 1"):
        RandomAccessClientManager(rho, seed=0)


def test_manager_rejects_too_many_clients_per_round() -> None:
    with pytest.raises(ValueError, match=r"availability\.params\.clients_per_round"):
        RandomAccessClientManager([0.5, 0.5, 0.0], seed=0, clients_per_round=3)


def test_manager_times_out_when_clients_are_missing() -> None:
    manager = RandomAccessClientManager([0.25] * 4, seed=0, wait_timeout=0.05)
    register_clients(manager, 3)  # partition ids 0..2 of a 3-client federation
    with pytest.raises(AvailabilityError, match="only 3 of data.num_clients=4"):
        manager.sample(1)


def test_manager_rejects_duplicate_partition_ids() -> None:
    manager = RandomAccessClientManager([0.5, 0.5], seed=0, wait_timeout=5)
    for cid in ("a", "b"):
        manager.register(InProcessClientProxy(cid, client_fn, node_context(0, 2, {})))
    with pytest.raises(AvailabilityError, match="partition id 0"):
        manager.sample(1)


def test_manager_register_unregister() -> None:
    manager = RandomAccessClientManager([0.5, 0.5], seed=0, wait_timeout=5)
    register_clients(manager, 2)
    proxies = manager.all()
    first = next(iter(proxies.values()))
    assert manager.register(first) is False  # already known
    manager.sample(1)
    manager.unregister(first)
    assert manager.num_available() == 1
    assert first.cid not in manager.all()
