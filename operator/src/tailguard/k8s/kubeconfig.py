"""Where the Kubernetes client finds its cluster: the kubeconfig, else the in-cluster account."""

from __future__ import annotations

import os


def load_cluster_config() -> str | None:
    """Load the kubeconfig, or the in-cluster service account where there is none; ``None`` once
    loaded, else one line that says why not."""
    import yaml
    from kubernetes import config

    try:
        config.load_config()  # type: ignore[no-untyped-call]
    except (config.ConfigException, OSError, yaml.YAMLError) as exc:
        where = os.environ.get("KUBECONFIG") or "~/.kube/config"
        return (
            f"no Kubernetes configuration to run against: {exc} (looked for a kubeconfig at {where}, "
            "then for the in-cluster service account)"
        )
    return None
