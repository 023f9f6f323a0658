"""What the container tests build and run on the installed Flower line: its constraints
file (the image's ``CONSTRAINTS`` build argument and the wheels served to the build),
the compose override added last, and the image tag that override names."""

from __future__ import annotations

from fedram_flwr.engines.flwr.flower_line import LINE

ON_GRPC_LINE = LINE.fleet == "gRPC"  # flwr 1.39
CONSTRAINTS = "constraints-1.39.txt" if ON_GRPC_LINE else "constraints.txt"
LINE_FILES: tuple[str, ...] = ("docker-compose.flwr-1.39.yml",) if ON_GRPC_LINE else ()
IMAGE = "fedram-flwr:flwr-1.39" if ON_GRPC_LINE else "fedram-flwr:latest"
