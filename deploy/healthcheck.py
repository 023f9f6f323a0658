"""Container health check: is a Flower process's gRPC health service SERVING?

``python deploy/healthcheck.py HOST:PORT`` exits 0 when the health server that
``flower-superlink`` / ``flower-supernode --health-server-address HOST:PORT`` starts
answers SERVING within the timeout, 1 otherwise. That server never uses TLS, so the
same check serves the plain and the TLS set-ups of docker-compose.yml.
"""

from __future__ import annotations

import sys

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc


def serving(address: str, timeout: float = 3.0) -> bool:
    with grpc.insecure_channel(address) as channel:
        try:
            reply = health_pb2_grpc.HealthStub(channel).Check(
                health_pb2.HealthCheckRequest(), timeout=timeout
            )
        except grpc.RpcError:
            return False
    return reply.status == health_pb2.HealthCheckResponse.SERVING


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: healthcheck.py HOST:PORT")
    sys.exit(0 if serving(sys.argv[1]) else 1)
