"""The fleet simulator: a trace through a modelled vLLM fleet, steered by tailguard or a peer.

Modules, from the bottom: ``profiles`` (engine-step models fitted to published figures),
``engine`` (one continuous-batching replica with vLLM's metrics; usable on its own),
``trace`` and ``synthetic`` (request traces), ``prometheus`` (what a scrape-and-query loop sees),
``fleet`` (Service, Deployment, pods, the clock and the event loop), ``policies`` (tailguard,
the peers and the hindsight yardsticks, one module each, and their registry), ``oracle`` (the
lower bound), ``report``, ``runner`` (a scenario through policies; the flat-fleet search),
``frontier`` (the idealised reactive policy), ``cli`` and ``bench`` (catalogue, goals, runs,
sweep, plots).
"""
