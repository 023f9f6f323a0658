"""Evaluation of a model on data.

What the server's central evaluation reports (overall, per-class and rare-pattern test
metrics; optionally the global training loss and the per-client accuracy distribution on
the clients' training data (FedAR Table 3) and test data, with the HCVaR of the clients'
test losses (RC-FL Table 1, Def. 2)), and the passes a client's ``@app.evaluate()`` block
makes on its own data.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
import torch
from flwr.common import NDArrays, Scalar
from torch import nn
from torch.nn import functional as F

from fedram_flwr.clients.batches import OnePass
from fedram_flwr.clients.models import on_device, set_weights
from fedram_flwr.objectives import hcvar


@torch.no_grad()
def predict_logits(
    model: nn.Module, x: np.ndarray | torch.Tensor, batch_size: int = 4096
) -> torch.Tensor:
    """The model's outputs on ``x`` in chunks of ``batch_size`` rows, computed on the
    model's device (``x`` is moved there if it is not), returned on the CPU."""
    model.eval()
    xt = on_device(x, next(model.parameters()).device)
    chunks = [model(xt[i : i + batch_size]) for i in range(0, len(xt), batch_size)]
    return torch.cat(chunks).cpu()


@torch.no_grad()
def evaluate_passes(model: nn.Module, one_pass: OnePass) -> tuple[float, float, int]:
    """(mean cross-entropy, accuracy, number of examples) of ``model`` over one pass."""
    model.eval()
    loss_sum, correct, count = 0.0, 0, 0
    for x, y in one_pass():
        logits = model(x)
        loss_sum += float(F.cross_entropy(logits, y, reduction="sum"))
        correct += int((logits.argmax(1) == y).sum())
        count += len(y)
    if count == 0:
        raise ValueError("evaluation: the client's data gave no example")
    return loss_sum / count, correct / count, count


def classification_metrics(
    logits: torch.Tensor, y: np.ndarray, num_classes: int, rare_classes: Sequence[int]
) -> tuple[float, dict[str, Scalar]]:
    """Mean cross-entropy, accuracy, accuracy per class and on the rare patterns."""
    yt = torch.from_numpy(y)
    loss = float(F.cross_entropy(logits, yt))
    correct = (logits.argmax(1) == yt).numpy()
    metrics: dict[str, Scalar] = {"accuracy": float(correct.mean())}
    for c in range(num_classes):
        mask = y == c
        if mask.any():
            metrics[f"accuracy-class-{c}"] = float(correct[mask].mean())
    if rare_classes:
        rare = np.isin(y, list(rare_classes))
        metrics["rare-accuracy"] = float(correct[rare].mean())
        metrics["frequent-accuracy"] = float(correct[~rare].mean())
    return loss, metrics


def tail_mean(values: np.ndarray, fraction: float, worst: bool) -> float:
    """Mean of the worst (lowest) or best ``fraction`` of ``values`` (at least one)."""
    v = np.sort(np.asarray(values, dtype=float))
    k = max(1, int(round(fraction * len(v))))
    return float(v[:k].mean() if worst else v[-k:].mean())


def client_distribution_metrics(
    logits: torch.Tensor, client_y: Sequence[np.ndarray]
) -> dict[str, Scalar | list[float]]:
    """Global training loss over the union of the clients' data (example-weighted), and
    the distribution of the accuracy on each client's own data: mean, variance (in %^2,
    as Table 3), worst and best 10% of the clients. ``logits`` are the model's outputs
    on the clients' data concatenated in client order."""
    y = np.concatenate(client_y)
    yt = torch.from_numpy(y)
    correct = (logits.argmax(1) == yt).numpy()
    bounds = np.cumsum([0, *(len(c) for c in client_y)])
    acc = np.array(
        [correct[a:b].mean() if b > a else np.nan for a, b in zip(bounds[:-1], bounds[1:])]
    )
    acc = acc[~np.isnan(acc)]
    return {
        "train-loss": float(F.cross_entropy(logits, yt)),
        "train-accuracy": float(correct.mean()),
        "client-acc-mean": float(acc.mean()),
        "client-acc-var": float((100 * acc).var()),
        "client-acc-worst10": tail_mean(acc, 0.1, worst=True),
        "client-acc-best10": tail_mean(acc, 0.1, worst=False),
        "client-accuracy": [float(a) for a in acc],
    }


def client_test_metrics(
    logits: torch.Tensor,
    y: np.ndarray,
    client_test: Sequence[np.ndarray],
    p: np.ndarray,
    hcvar_alpha: Sequence[float],
) -> dict[str, Scalar | list[float]]:
    """Each client's accuracy and mean loss on its own test set (``client_test``:
    indices into the test set ``y`` the ``logits`` are for), their distribution (mean,
    variance in %^2, worst and best 10%, RC-FL Table 1) and the HCVaR_{1-alpha} of the
    test losses with weights p_i = m_i / m (Def. 2, computed exactly as the primal of
    eq. 1). Clients without test samples are left out."""
    losses = F.cross_entropy(logits, torch.from_numpy(y), reduction="none").numpy()
    correct = (logits.argmax(1).numpy() == y).astype(float)
    has = np.array([idx.size > 0 for idx in client_test])
    acc = np.array([correct[idx].mean() for idx in client_test if idx.size])
    loss = np.array([losses[idx].mean() for idx in client_test if idx.size])
    alpha = np.broadcast_to(np.asarray(hcvar_alpha, dtype=float), has.shape)
    return {
        "client-test-acc-mean": float(acc.mean()),
        "client-test-acc-var": float((100 * acc).var()),
        "client-test-acc-worst10": tail_mean(acc, 0.1, worst=True),
        "client-test-acc-best10": tail_mean(acc, 0.1, worst=False),
        "client-test-loss-max": float(loss.max()),
        "client-test-hcvar": hcvar(loss, np.asarray(p, dtype=float)[has], alpha[has]),
        "client-test-accuracy": [float(a) for a in acc],
        "client-test-loss": [float(v) for v in loss],
    }


EvaluateFn = Callable[[int, NDArrays, dict[str, Scalar]], tuple[float, dict[str, Scalar]] | None]
"""Flower's legacy ``evaluate_fn``: (server round, model arrays, config) -> (loss, metrics)."""


def make_evaluate_fn(
    model: nn.Module,
    x: np.ndarray,
    y: np.ndarray,
    *,
    num_classes: int,
    rare_classes: Sequence[int],
    every: int,
    num_rounds: int,
    client_x: Sequence[np.ndarray] | None = None,
    client_y: Sequence[np.ndarray] | None = None,
    client_test: Sequence[np.ndarray] | None = None,
    hcvar_alpha: Sequence[float] = (0.5,),
) -> EvaluateFn:
    """A Flower ``evaluate_fn`` testing every ``every`` rounds, at round 0 and the last.

    With ``client_x``/``client_y`` (the clients' training sets) it also reports
    :func:`client_distribution_metrics`, and with ``client_test`` too (each client's
    indices into the test set) :func:`client_test_metrics`; the per-client lists only
    at the last round."""
    # Built once, on the model's device: the test set and the union of the clients' data.
    device = next(model.parameters()).device
    test_x = on_device(x, device)
    train_x = on_device(np.concatenate(client_x), device) if client_x is not None else None
    sizes = np.array([len(c) for c in client_y]) if client_y is not None else None

    def evaluate(server_round: int, parameters: NDArrays, config: dict[str, Scalar]):
        if server_round % every and server_round != num_rounds:
            return None
        set_weights(model, parameters)
        logits = predict_logits(model, test_x)
        loss, metrics = classification_metrics(logits, y, num_classes, rare_classes)
        if train_x is not None and client_y is not None and sizes is not None:
            train_logits = predict_logits(model, train_x)
            extra = client_distribution_metrics(train_logits, client_y)
            if client_test is not None:
                p = sizes / sizes.sum()
                extra.update(client_test_metrics(logits, y, client_test, p, hcvar_alpha))
            if server_round != num_rounds:
                for key in ("client-accuracy", "client-test-accuracy", "client-test-loss"):
                    extra.pop(key, None)
            metrics.update(extra)  # type: ignore[arg-type]
        return loss, metrics

    return evaluate
