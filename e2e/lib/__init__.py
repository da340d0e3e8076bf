"""Helpers for the tests that run against a cluster: clients, waits, the operator under test."""
