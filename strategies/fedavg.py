"""FedAvg (McMahan et al., AISTATS 2017), Flower's implementation made reproducible."""

from __future__ import annotations

from flwr.common import FitRes, Parameters, Scalar
from flwr.server.client_proxy import ClientProxy
from flwr.server.strategy import FedAvg as FlowerFedAvg

from fedram_flwr.protocol import PARTITION_ID


def client_id(res: FitRes) -> int:
    """The partition id a client reports in its fit metrics."""
    return int(res.metrics[PARTITION_ID])


def in_partition_order(results: list[tuple[ClientProxy, FitRes]]) -> list[FitRes]:
    """The results' ``FitRes`` by the clients' partition ids: sums over them are the same
    in every engine, whatever order the replies arrived in."""
    return sorted((res for _, res in results), key=client_id)


class FedAvg(FlowerFedAvg):
    """Flower's ``FedAvg`` with results aggregated in partition-id order.

    Flower's server loop collects results in completion order; summing floats in a
    fixed order makes the aggregate bitwise reproducible across engines when m > 1.
    """

    def aggregate_fit(
        self,
        server_round: int,
        results: list[tuple[ClientProxy, FitRes]],
        failures: list[tuple[ClientProxy, FitRes] | BaseException],
    ) -> tuple[Parameters | None, dict[str, Scalar]]:
        ordered = sorted(results, key=lambda r: int(r[1].metrics.get(PARTITION_ID, -1)))
        return super().aggregate_fit(server_round, ordered, failures)
