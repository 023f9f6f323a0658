"""Flower's Message API: availability for any strategy, the project's strategies and clients."""

from fedram_flwr.message_api.availability import (
    AvailabilityStrategy,
    partition_id_query,
    with_availability,
)

__all__ = ["AvailabilityStrategy", "partition_id_query", "with_availability"]
