"""RC-FL client of rFedFair: trains (omega, eta) jointly on f^{mu,i} (eq. 5, Alg. 1)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from flwr.common import NDArrays, RecordDict

from fedram_flwr.clients.cvar import train_with_threshold
from fedram_flwr.clients.erm import ERMClient, FitResult
from fedram_flwr.clients.training import LocalTrainer
from fedram_flwr.objectives import check_alpha, rcfl_gradient_weights
from fedram_flwr.protocol import LR_ETA, RCFL_ALPHA, RCFL_MU, RCFL_P, THRESHOLD_ETA


def fit_rcfl(
    trainer: LocalTrainer, parameters: NDArrays, config: Mapping[str, Any], state: RecordDict
) -> FitResult:
    """Train (omega, eta) jointly on rFedFair's f^{mu,i} (RC-FL eq. 5, Alg. 1).

    f^{mu,i}(omega, eta) = (1 / alpha_i) softplus_mu(f_i(omega) - eta) + eta. For each of
    its kappa local steps (``training.local_steps``; a batch as large as the client's
    data makes them the paper's full gradient steps), with f_b the mean loss of the
    step's batch at (omega_t, eta_t)::

        omega <- omega - beta (s / alpha_i) grad f_b,   eta <- eta - beta_eta (1 - s / alpha_i)

    s = sigmoid((f_b - eta_t) / mu) (``rcfl_gradient_weights``; Alg. 1's local step, both
    gradients at the same point). eta comes back from the server every round (it is
    averaged, Alg. 1), so nothing is kept in ``state``.

    Parameters
    ----------
    trainer : LocalTrainer
        The client's model, data and training settings.
    parameters : NDArrays
        (omega, eta): the model's arrays, then eta as one more 1-element array.
    config : Mapping[str, Any]
        The round's train config (``server-round``, optional ``lr``, ``local-epochs``, and
        ``rcfl-alpha`` (alpha_i, in [p_i, 1]), ``rcfl-p`` (p_i = m_i / m, in (0, 1]),
        ``rcfl-mu`` (mu > 0, the softplus smoothing), ``lr-eta`` (beta_eta > 0; beta is ``lr``)).
    state : RecordDict
        The client's persistent ``Context.state`` (unused).

    Returns
    -------
    FitResult
        Flower's fit triple: (omega, eta), m_i (the client's number of examples) and the
        fit metrics (``train-loss`` and ``eta``).

    Raises
    ------
    ValueError
        If alpha_i is not in [p_i, 1].
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
    """rFedFair's NumPyClient: :func:`fit_rcfl` on the client's data.

    Constructor parameters: :class:`~fedram_flwr.clients.erm.ERMClient`'s.
    """

    local_fit = staticmethod(fit_rcfl)
