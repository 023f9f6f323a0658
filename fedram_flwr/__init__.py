"""fedram-flwr: federated learning when clients are not always there (Flower app).

``strategies/`` and ``clients/`` sit at the repository root and are installed as
``fedram_flwr.strategies`` / ``fedram_flwr.clients`` only ([tool.setuptools.package-dir]
in pyproject.toml; an editable install maps them the same way). A Flower FAB holds them
inside the package (:func:`fedram_flwr.engines.flwr.staging.stage_app`).
"""

__version__ = "0.1.0"
