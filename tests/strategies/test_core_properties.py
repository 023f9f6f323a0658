"""Properties of the cores over random inputs (hypothesis), drawn from small grids so that
ties, zeros, one client and all clients come up: CA-Fed's exclusion visits the clients in
the order its docstring gives (ties in |lambda| broken by pi, ties in pi by the more
correlated first, then by id) and its weights keep sum_k pi_k q_k = alpha(I); the round
driver's result does not depend on the order replies arrive in; FedAvg is the
example-weighted mean; FedAvg over all clients weighs each update 1/N (FedAWE App. J.2).

The examples are derandomized (the same every run) and bounded by the active hypothesis
profile (tests/conftest.py): ``HYPOTHESIS_PROFILE=thorough`` runs many more."""

from __future__ import annotations

from typing import Any

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from fedram_flwr.protocol import PARTITION_ID, ClientReply
from fedram_flwr.strategies.ca_fed_math import ca_fed_weights, exclusion_orders, get
from fedram_flwr.strategies.fedavg import FedAvgCore
from fedram_flwr.strategies.participation import FedAvgAllCore
from fedram_flwr.strategies.round_driver import Received, RoundPolicy, RoundState, drive_round

MAX_CLIENTS = 8


@st.composite
def ca_fed_inputs(draw: st.DrawFn) -> dict[str, Any]:
    """alpha, pi, lambda, the loss gaps, kappa2 and tau of 1..8 clients, each from a few
    values (ties in every key, zero gaps, pi = 1, lambda = 0)."""
    n = draw(st.integers(1, MAX_CLIENTS))

    def column(values: list[float]) -> np.ndarray:
        return np.array(draw(st.lists(st.sampled_from(values), min_size=n, max_size=n)))

    weights = column([1, 1, 2, 3])
    return {
        "alpha": weights / weights.sum(),
        "pi": column([0.1, 0.25, 0.5, 1.0]),
        "lam": column([0.0, 0.5, -0.5, 0.9, -0.9]),
        "gap": column([0.0, 0.0, 0.25, 1.0, 2.0]),
        "kappa2": draw(st.sampled_from([0.0, 1e-3, 0.01, 0.5, 10.0])),
        "tau": draw(st.sampled_from([0.0, 1e-3, 0.02])),
    }


def docstring_orders(pi: np.ndarray, lam: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The two passes' orders built by Python's sort from the keys CA-Fed's docstring
    names: line 6 by descending |lambda|, then ascending pi, then id; line 7 by
    ascending pi, then descending |lambda|, then id."""
    corr = np.abs(lam)
    ids = range(pi.size)
    line6 = np.array(sorted(ids, key=lambda k: (-corr[k], pi[k], k)), dtype=np.intp)
    line7 = np.array(sorted(ids, key=lambda k: (pi[k], -corr[k], k)), dtype=np.intp)
    return line6, line7


@given(ca_fed_inputs())
def test_ca_fed_breaks_ties_as_its_docstring_says(inputs) -> None:
    """Ties in pi (drawn often here) visit the more correlated client first in line 7's
    pass, ties in |lambda| the less available first in line 6's."""
    got = exclusion_orders(inputs["pi"], inputs["lam"])
    want = docstring_orders(inputs["pi"], inputs["lam"])
    for a, b in zip(got, want, strict=True):
        np.testing.assert_array_equal(a, b)


def by_the_docstring(alpha, pi, lam, gap, kappa2, tau) -> np.ndarray:
    """CA-Fed's q (Alg. 1 lines 5-7) with :func:`docstring_orders`."""
    line6, line7 = docstring_orders(pi, lam)
    included = get(np.ones(alpha.size, bool), line6, alpha, gap, kappa2, tau)
    included = get(included, line7, alpha, gap, kappa2, tau)
    return np.where(included, alpha / pi, 0.0)


@given(ca_fed_inputs())
def test_ca_fed_visits_the_clients_in_the_order_its_docstring_gives(inputs) -> None:
    np.testing.assert_array_equal(ca_fed_weights(**inputs), by_the_docstring(**inputs))


@given(ca_fed_inputs())
def test_ca_fed_keeps_alpha_over_pi_on_a_nonempty_set(inputs) -> None:
    """q_k is alpha_k / pi_k or 0, at least one client is kept, and sum_k pi_k q_k is the
    kept clients' share alpha(I) of the target importance (1 when nobody is excluded)."""
    alpha, pi = inputs["alpha"], inputs["pi"]
    q = ca_fed_weights(**inputs)
    kept = q > 0
    assert kept.any()
    np.testing.assert_array_equal(q[kept], (alpha / pi)[kept])
    assert np.isclose((pi * q).sum(), alpha[kept].sum(), rtol=1e-12)


@st.composite
def round_replies(draw: st.DrawFn) -> tuple[int, list[tuple[int, int, np.ndarray]]]:
    """N clients and the replies of a subset of them (one, some or all): (partition id,
    examples >= 1, a float32 array of a few values with ties and zeros)."""
    n = draw(st.integers(1, MAX_CLIENTS))
    ids = draw(st.lists(st.integers(0, n - 1), min_size=1, max_size=n, unique=True))
    value = st.sampled_from([0.0, 0.0, 1.0, -1.0, 0.1, 3.5, 1e-3])
    replies = [
        (
            pid,
            draw(st.sampled_from([1, 1, 2, 7, 100])),
            np.array(draw(st.lists(value, min_size=3, max_size=3)), np.float32),
        )
        for pid in ids
    ]
    return n, replies


def received(replies: list[tuple[int, int, np.ndarray]]) -> list[Received[int]]:
    return [
        Received(pid, f"client {pid}", pid, {PARTITION_ID: pid, "n": m}, lambda a=a: [a.copy()])
        for pid, m, a in replies
    ]


def as_reply(r: Received[int]) -> ClientReply:
    return ClientReply(r.partition_id, r.metrics["n"], r.metrics, r.decode)


def one_round(core, replies, order: list[int]) -> np.ndarray:
    initial = [np.full(3, 0.5, np.float32)]
    core = core.for_model(initial)
    arriving = [received(replies)[i] for i in order]
    result = drive_round(
        core,
        core.init(initial),
        1,
        arriving,
        [],
        RoundState(),
        RoundPolicy(True),
        reply_of=as_reply,
        strategy="property",
    )
    return core.arrays(result.outcome.state)[0]


@given(round_replies(), st.randoms(use_true_random=False))
def test_the_order_replies_arrive_in_does_not_change_a_round(drawn, rng) -> None:
    """Bit for bit: the driver hands the core the replies in partition-id order."""
    n, replies = drawn
    order = list(range(len(replies)))
    shuffled = order.copy()
    rng.shuffle(shuffled)
    for core in (FedAvgCore(), FedAvgAllCore(num_clients=n, lr=0.1)):
        np.testing.assert_array_equal(
            one_round(core, replies, shuffled), one_round(core, replies, order)
        )


@given(round_replies())
def test_fedavg_is_the_example_weighted_mean(drawn) -> None:
    """sum_k n_k w_k / sum_k n_k (float64 reference); one reply: exactly its model."""
    _, replies = drawn
    got = one_round(FedAvgCore(), replies, list(range(len(replies))))
    counts = np.array([m for _, m, _ in replies], np.float64)
    models = np.array([a for _, _, a in replies], np.float64)
    want = (counts[:, None] * models).sum(0) / counts.sum()
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-7)
    if len(replies) == 1:
        np.testing.assert_array_equal(got, replies[0][2])


@given(round_replies())
def test_fedavg_over_all_clients_weighs_each_update_one_over_n(drawn) -> None:
    """w + (1/N) sum_{i in A} (w_i - w): the unavailable clients count as zero updates,
    so the weights of the replies sum to |A| / N (1 when every client replied)."""
    n, replies = drawn
    got = one_round(FedAvgAllCore(num_clients=n, lr=0.1), replies, list(range(len(replies))))
    w = np.full(3, 0.5, np.float64)
    want = w + sum(a.astype(np.float64) - w for _, _, a in replies) / n
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-7)
