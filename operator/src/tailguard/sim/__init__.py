"""The fleet simulator: a trace through a modelled vLLM fleet, steered by tailguard or a peer.

Modules, from the bottom: ``profiles`` (engine-step models fitted to published figures),
``engine`` (one continuous-batching replica with vLLM's metrics; usable on its own),
``trace`` and ``synthetic`` (request traces), ``prometheus`` (what a scrape-and-query loop sees),
``fleet`` (Service, Deployment, pods, the clock), ``autoscalers`` (tailguard and the peers),
``oracle`` (the lower bound), ``report``, ``runner``, ``cli`` and ``bench``.
"""
