"""RC-FL client of rFedFair: trains (omega, eta) jointly on f^{mu,i} (eq. 5, Alg. 1)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from flwr.common import NDArrays, RecordDict

from fedram_flwr.clients.cvar import train_with_threshold
from fedram_flwr.clients.erm import ERMClient, FitResult
from fedram_flwr.objectives import check_alpha, rcfl_gradient_weights
from fedram_flwr.protocol import LR_ETA, RCFL_ALPHA, RCFL_MU, RCFL_P, THRESHOLD_ETA
from fedram_flwr.training import LocalTrainer


def fit_rcfl(
    trainer: LocalTrainer, parameters: NDArrays, config: Mapping[str, Any], state: RecordDict
) -> FitResult:
    """Receives (omega, eta); for each of its kappa local steps (``training.local_steps``;
    a batch as large as the client's data makes them the paper's full gradient steps),
    with f_b the mean loss of the step's batch at (omega_t, eta_t):

        omega <- omega - beta (s / alpha_i) grad f_b,   eta <- eta - beta_eta (1 - s / alpha_i)

    s = sigmoid((f_b - eta_t) / mu) (``rcfl_gradient_weights``; Alg. 1's local step, both
    gradients at the same point). Train config: ``rcfl-alpha`` (alpha_i), ``rcfl-p`` (p_i:
    alpha_i is checked to lie in [p_i, 1]), ``rcfl-mu``, ``lr-eta`` (beta_eta; beta is
    ``lr``). Returns (omega, eta) and metrics ``train-loss`` and ``eta``. eta comes back
    from the server every round (it is averaged, Alg. 1), so nothing is kept in ``state``.
    """
    alpha, p = float(config[RCFL_ALPHA]), float(config[RCFL_P])
    check_alpha([alpha], [p], f"alpha of client {trainer.partition_id}")
    mu = float(config[RCFL_MU])
    return train_with_threshold(
        trainer,
        parameters,
        config,
        lambda loss, eta: rcfl_gradient_weights(loss, eta, alpha, mu),
        lr=float(config[LR_ETA]),
        name=THRESHOLD_ETA,
    )


class RCFLClient(ERMClient):
    """rFedFair's NumPyClient: :func:`fit_rcfl` on the client's data."""

    local_fit = staticmethod(fit_rcfl)
