"""Integration tests: the foundation (CRD, renderers, reconcile) against a real API server."""
