"""Data and model: softmax regression in numpy on 2-D Gaussian blobs.

Client i holds class i (one blob each); the test set holds every class.
"""

from __future__ import annotations

import numpy as np

NUM_CLASSES = 3
CENTRES = np.array([[-2.0, 0.0], [2.0, 0.0], [0.0, 0.0]])


def load_data(partition_id: int | None, n: int = 200, seed: int = 0):
    """(x, y) of client ``partition_id`` (its own class), or of the test set (None)."""
    rng = np.random.default_rng([seed, NUM_CLASSES if partition_id is None else partition_id])
    classes = np.arange(NUM_CLASSES) if partition_id is None else np.array([partition_id])
    y = rng.choice(classes, size=n)
    x = CENTRES[y] + rng.normal(size=(n, 2))
    return x, y


def init_weights() -> np.ndarray:
    return np.zeros((3, NUM_CLASSES))  # rows: x1, x2, bias


def loss_and_grad(w: np.ndarray, x: np.ndarray, y: np.ndarray) -> tuple[float, np.ndarray]:
    """Mean cross-entropy of softmax(x w) and its gradient in w."""
    xb = np.hstack([x, np.ones((len(x), 1))])
    logits = xb @ w
    p = np.exp(logits - logits.max(axis=1, keepdims=True))
    p /= p.sum(axis=1, keepdims=True)
    loss = float(-np.log(p[np.arange(len(y)), y] + 1e-12).mean())
    p[np.arange(len(y)), y] -= 1.0
    return loss, xb.T @ p / len(y)


def accuracy(w: np.ndarray, x: np.ndarray, y: np.ndarray) -> float:
    return float(((np.hstack([x, np.ones((len(x), 1))]) @ w).argmax(axis=1) == y).mean())
