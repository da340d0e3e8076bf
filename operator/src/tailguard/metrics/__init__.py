"""Metrics in: PromQL builders (pure), the Prometheus reader, a fake source, and the per-service signals."""
