"""``python -m fedram_flwr.cli``: the ``fedram`` command."""

import sys

from fedram_flwr.cli import main

sys.exit(main())
