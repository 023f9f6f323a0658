"""SCAFFOLD's client (Karimireddy et al., ICML 2020, Alg. 1 lines 7-13, option II)."""

from __future__ import annotations

import numpy as np
import torch
from flwr.common import ArrayRecord, NDArrays, Scalar

from fedram_flwr.clients.erm import ERMClient
from fedram_flwr.models import get_weights
from fedram_flwr.objectives import scaffold_control_update
from fedram_flwr.protocol import (
    BATCH_SIZE,
    LOCAL_EPOCHS,
    LR,
    SCAFFOLD_CONTROL,
    join_model_control,
    split_model_control,
)
from fedram_flwr.training import num_local_steps


class ScaffoldClient(ERMClient):
    """Receives (x, c); runs K local SGD steps on g_i(y) - c_i + c; sets c_i by
    option II and keeps it in ``Context.state`` (zero before the first round it
    trains); returns (y_i, c_i^+ - c_i) and metrics ``train-loss``.

    K is the number of steps local SGD takes (``local_steps``, or epochs x batches).
    """

    def control(self, like: NDArrays) -> NDArrays:
        """c_i from the persistent state, zeros shaped ``like`` the first time."""
        if SCAFFOLD_CONTROL in self.state:
            return self.state[SCAFFOLD_CONTROL].to_numpy_ndarrays()
        return [np.zeros_like(a) for a in like]

    def fit(self, parameters: NDArrays, config: dict[str, Scalar]):
        x, c = split_model_control(parameters)
        c_i = self.control(c)
        offset = [torch.from_numpy(np.asarray(b - a)) for a, b in zip(c_i, c)]  # c - c_i
        metrics = self.train(x, config, grad_offset=offset)
        y = get_weights(self.model)
        k = num_local_steps(
            len(self.y),
            int(config.get(BATCH_SIZE, self.batch_size)),
            int(config.get(LOCAL_EPOCHS, self.local_epochs)),
            self.local_steps,
            self.drop_last,
        )
        lr = float(config.get(LR, self.lr))
        c_new = [scaffold_control_update(*v, k, lr) for v in zip(c_i, c, x, y)]
        self.state[SCAFFOLD_CONTROL] = ArrayRecord(c_new)
        deltas = [new - old for new, old in zip(c_new, c_i)]
        return join_model_control(y, deltas), len(self.y), metrics
