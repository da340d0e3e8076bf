"""kopf wiring: a few lines per handler around the plain functions in ``tailguard.reconcile``."""
