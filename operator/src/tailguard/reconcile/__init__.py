"""Reconciliation: create or patch children, derive status, explain what happened. Idempotent."""
