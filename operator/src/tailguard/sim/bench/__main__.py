"""``python -m tailguard.sim.bench``."""

import sys

from tailguard.sim.bench.runs import main

sys.exit(main())
