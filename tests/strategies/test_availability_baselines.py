"""The availability-aware baselines' weights (CA-Fed Sec. V-A c), by hand."""

from __future__ import annotations

import numpy as np

from fedram_flwr.strategies.availability_baselines import (
    adafed_weights,
    f3ast_weights,
    more_available_weights,
)
from fedram_flwr.strategies.ca_fed import (
    biased_importance,
    unbiased_weights,
)


def test_baseline_weights_by_hand() -> None:
    alpha, pi = np.array([0.5, 0.3, 0.2]), np.array([0.5, 0.6, 0.25])
    active = np.array([True, False, True])
    unbiased = unbiased_weights(alpha, pi)
    np.testing.assert_allclose(unbiased, [1.0, 0.5, 0.8])
    # Unbiased: the biased importance pi (~*) q of eq. 4 is alpha itself.
    np.testing.assert_allclose(biased_importance(pi, unbiased), alpha)
    # AdaFed: the active clients' 1.0 and 0.8, normalised by their sum 1.8.
    np.testing.assert_allclose(adafed_weights(alpha, pi, active), [1 / 1.8, 0.0, 0.8 / 1.8])
    np.testing.assert_allclose(more_available_weights(alpha, pi, 0.5), [1.0, 0.5, 0.0])
    # F3AST with one slot: the active client with the largest alpha / pi (1.0 > 0.8).
    np.testing.assert_allclose(f3ast_weights(alpha, pi, active, 1), [1.0, 0.0, 0.0])
    np.testing.assert_allclose(f3ast_weights(alpha, pi, active, 5), [1.0, 0.0, 0.8])
