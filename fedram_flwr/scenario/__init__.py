"""The scenario file: the single source of truth of a run.

:mod:`~fedram_flwr.scenario.schema` the typed coercion of YAML values and the error that
names a field; :mod:`~fedram_flwr.scenario.config` the frozen :class:`Scenario` and its
sections; :mod:`~fedram_flwr.scenario.time_config` the ``time:`` section (device speeds,
round policies); :mod:`~fedram_flwr.scenario.sweep` sweeps and dotted ``FIELD=VALUE``
overrides; :mod:`~fedram_flwr.scenario.run_config` a run's scenario as a node reads it
from Flower's run config; :mod:`~fedram_flwr.scenario.paths` the app's root.

The scenario is parsed here with the schema alone; the registry
(:mod:`fedram_flwr.registry`) checks ``algorithm.params`` and ``availability.params``
against the algorithm and oracle they name. Nothing here imports Flower, torch or a
module of the package outside this folder.
"""
