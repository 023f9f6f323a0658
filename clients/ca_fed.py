"""CA-Fed client: reports its loss at the received model, then trains (Alg. 1, lines 3
and 8-11); on request it also reports its minimum local loss F_k*."""

from __future__ import annotations

import numpy as np
import torch
from flwr.common import ConfigRecord, NDArrays, Scalar
from torch import nn
from torch.nn import functional as F

from fedram_flwr.clients.erm import ERMClient
from fedram_flwr.models import get_weights, set_weights
from fedram_flwr.protocol import LOCAL_OPTIMUM, RECEIVED_LOSS, REPORT_LOCAL_OPTIMUM
from fedram_flwr.training import on_device


def local_optimum_loss(
    model: nn.Module,
    x: np.ndarray | torch.Tensor,
    y: np.ndarray | torch.Tensor,
    weight_decay: float,
    iterations: int = 200,
) -> float:
    """F_k* of the client's data: the mean cross-entropy on (x, y) at the minimiser of
    mean cross-entropy + (weight_decay / 2) ||w||^2 (the ridge objective local SGD
    optimises, CA-Fed Sec. V-A b), found by full-batch L-BFGS from ``model``'s weights
    (``model`` is changed). Strongly convex for the linear model when weight_decay > 0."""
    params = list(model.parameters())
    xt, yt = on_device(x, params[0].device), on_device(y, params[0].device)
    opt = torch.optim.LBFGS(
        params,
        lr=1.0,
        max_iter=iterations,
        tolerance_grad=1e-9,
        tolerance_change=1e-12,
        line_search_fn="strong_wolfe",
    )

    def objective() -> torch.Tensor:
        opt.zero_grad(set_to_none=True)
        loss = F.cross_entropy(model(xt), yt)
        loss = loss + 0.5 * weight_decay * sum((p * p).sum() for p in params)
        loss.backward()
        return loss

    model.train()
    opt.step(objective)
    with torch.no_grad():
        return float(F.cross_entropy(model(xt), yt))


class CAFedClient(ERMClient):
    """ERM local training (eq. 2) that also returns F_k^(t) = F_k(w_{t,0}, B_{t,0}),
    the mean loss of its first mini-batch at the received model, as the fit metric
    ``received-loss``. That value is the first SGD step's own forward pass, observed
    (the gradient is scaled by exactly 1.0, so training is bit-identical to ERM's): the
    report costs no extra computation. It is the data loss: a ridge penalty given as
    ``training.weight_decay`` (CA-Fed Sec. V-A b) acts in SGD's step and is not in it;
    (mu/2)||w_t||^2 is the same for every client of round t, but F_hat* compares
    rounds, so F_hat - F_hat* omits (mu/2)(||w_t||^2 - ||w_s||^2).

    When the fit config carries ``report-local-optimum`` (CA-Fed with ``loss_floor:
    local-optimum``) it also returns ``local-optimum-loss``, :func:`local_optimum_loss`
    on its training data, computed once (from the received model) and kept in
    ``Context.state``."""

    def local_optimum(self, theta: NDArrays) -> float:
        if LOCAL_OPTIMUM not in self.state:
            set_weights(self.model, theta)
            value = local_optimum_loss(self.model, self.x, self.y, self.weight_decay)
            self.state[LOCAL_OPTIMUM] = ConfigRecord({LOCAL_OPTIMUM: value})
        return float(self.state[LOCAL_OPTIMUM][LOCAL_OPTIMUM])

    def fit(self, parameters: NDArrays, config: dict[str, Scalar]):
        floor = (
            {LOCAL_OPTIMUM: self.local_optimum(parameters)}
            if config.get(REPORT_LOCAL_OPTIMUM)
            else {}
        )
        seen: list[float] = []

        def observe(loss: float) -> float:
            seen.append(loss)
            return 1.0

        metrics = self.train(parameters, config, batch_weight=observe)
        return get_weights(self.model), len(self.y), {**metrics, RECEIVED_LOSS: seen[0], **floor}
