"""``python -m tailguard.sim``: the ``tailguard simulate`` command on its own."""

import sys

from tailguard.sim.cli import main

sys.exit(main())
