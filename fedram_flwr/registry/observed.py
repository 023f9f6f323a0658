"""Moved to :mod:`fedram_flwr.availability.specs.observed` (the oracle specs are availability
knowledge a node reads). This old path stays an alias of that module (the same module
object, private names and monkeypatching included); the client side never imports it.
"""

import sys

import fedram_flwr.availability.specs.observed  # noqa: F401 (loads it)

sys.modules[__name__] = sys.modules["fedram_flwr.availability.specs.observed"]
