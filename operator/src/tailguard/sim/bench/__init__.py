"""The benchmark behind ``make bench``: the catalogue's traces through every policy, the
hindsight flat fleet, the issue's goals, and the frontiers (``python -m tailguard.sim.bench``).

``catalogue`` says what runs (traces × policies and their setting), ``goals`` the verdicts,
``runs`` runs them and prints the tables, ``sweep`` the policies' swept frontiers, ``plots`` the
figures.
"""

from tailguard.sim.bench.catalogue import PROFILE, SLO, TRACES, BenchTrace, by_key
from tailguard.sim.bench.goals import Goal, goals
from tailguard.sim.bench.runs import main

__all__ = ["PROFILE", "SLO", "TRACES", "BenchTrace", "Goal", "by_key", "goals", "main"]
