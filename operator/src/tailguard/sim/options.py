"""Names from the simulator that the ``tailguard`` command declares without importing it.

The simulator needs numpy and matplotlib (the ``sim`` extra); the ``tailguard`` command builds its
parser for every subcommand, so ``tailguard run`` must be able to declare its options without them.
``tailguard simulate`` hands its arguments to the simulator's own parser (``tailguard.sim.cli``).
"""

from __future__ import annotations

#: The token mixes of ``tailguard.sim.synthetic.MIXES`` by name (a unit test keeps them equal).
MIX_NAMES = ("chat", "code", "decode-heavy", "long-context", "prefill-heavy", "sharegpt")
