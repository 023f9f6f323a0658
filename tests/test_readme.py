"""The README's Python blocks run as written (import paths and constructors of the
library), and its set-up section names what scripts/setup.sh installs."""

from __future__ import annotations

import re

from fedram_flwr.registry.app_config import APP_ROOT

README = (APP_ROOT / "README.md").read_text()


def python_blocks(text: str) -> list[str]:
    return re.findall(r"^```python\n(.*?)^```", text, flags=re.MULTILINE | re.DOTALL)


def test_the_server_block_wraps_flowers_fedavg_and_ours_in_an_oracle() -> None:
    from flwr.serverapp.strategy import FedAvg

    from fedram_flwr.availability import RandomAccessClientManager
    from fedram_flwr.message_api import FedCVaRAvg

    server = next(b for b in python_blocks(README) if "with_availability" in b)
    namespace: dict = {}
    exec(compile(server, "README.md (server)", "exec"), namespace)
    strategy = namespace["strategy"]  # the last one the block builds: Fed-CVaR-Avg
    assert isinstance(strategy.strategy, FedCVaRAvg)
    assert isinstance(strategy.oracle, RandomAccessClientManager)
    assert strategy.oracle.draw(1) == RandomAccessClientManager([0.5, 0.4, 0.1], seed=0).draw(1)
    assert namespace["FedAvg"] is FedAvg  # Flower's own, wrapped first in the block


def test_the_client_block_registers_the_query_and_a_train_handler() -> None:
    from flwr.clientapp import ClientApp

    from fedram_flwr.clients import partition_id_query

    client = next(b for b in python_blocks(README) if "ClientApp()" in b)
    namespace: dict = {}
    exec(compile(client, "README.md (client)", "exec"), namespace)
    assert isinstance(namespace["app"], ClientApp)
    assert namespace["partition_id_query"] is partition_id_query
    assert callable(namespace["train"])


def test_the_set_up_section_names_what_setup_installs() -> None:
    setup = (APP_ROOT / "scripts" / "setup.sh").read_text()
    for package in ("dataset-fashion-mnist", "docker-compose"):
        assert package in setup and f"`{package}`" in README, package
    constraints = (APP_ROOT / "constraints.txt").read_text()
    for pin in re.findall(r"^(flwr|torch|torchvision)==(\S+)$", constraints, flags=re.M):
        assert f"{pin[0]} {pin[1]}" in README, pin
