"""Kubernetes: pure renderers of the objects tailguard manages, RBAC, and the API-server adapter."""
