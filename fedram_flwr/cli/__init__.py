"""The ``fedram`` command line (``fedram run``, ``fedram report``, ``fedram show``).

:mod:`~fedram_flwr.cli.commands` holds what the commands do, :mod:`~fedram_flwr.cli.args`
their arguments, :mod:`~fedram_flwr.cli.run_checks` the checks ``fedram run`` makes on
run folders before it runs, :mod:`~fedram_flwr.cli.interrupt` what Ctrl-C records, and
:mod:`~fedram_flwr.cli.extras` what works without the ``experiments`` extra.
"""

from fedram_flwr.cli.commands import main

__all__ = ["main"]
