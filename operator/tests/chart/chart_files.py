"""Files the chart carries that are generated from the repository: the CRDs, the RBAC rules, the dashboard.

``make chart-sync`` runs this module as a script to write them; the tests compare the chart with
:func:`expected_files` so that a stale copy fails with the command that fixes it.
"""

from __future__ import annotations

import sys
from pathlib import Path

import yaml

from tailguard.k8s.rbac import CLUSTER_RULES, NAMESPACED_RULES

REPO = Path(__file__).resolve().parents[3]
CHART = REPO / "charts" / "tailguard"
DASHBOARD = REPO / "docs" / "dashboard.json"
CHART_DASHBOARD = CHART / "dashboards" / "tailguard.json"
RBAC_RULES = CHART / "files" / "rbac-rules.yaml"


def rbac_rules_yaml() -> str:
    """The operator's rules as the chart's templates read them (``namespaced`` and ``cluster`` lists)."""
    header = (
        "# Generated from tailguard.k8s.rbac by `make chart-sync`; do not edit.\n"
        "# namespaced: granted in every managed namespace (a Role each, or the ClusterRole).\n"
        "# cluster: granted cluster-wide in either scope.\n"
    )
    body = {"namespaced": NAMESPACED_RULES, "cluster": CLUSTER_RULES}
    return header + yaml.safe_dump(body, sort_keys=False)


def expected_files(repo: Path = REPO) -> dict[Path, str]:
    """Every generated chart file (absolute path) and the text it must hold."""
    chart = repo / "charts" / "tailguard"
    files = {
        chart / "crds" / crd.name: crd.read_text(encoding="utf-8")
        for crd in sorted((repo / "crds").glob("*.yaml"))
    }
    files[chart / "files" / "rbac-rules.yaml"] = rbac_rules_yaml()
    files[chart / "dashboards" / "tailguard.json"] = (repo / "docs" / "dashboard.json").read_text(
        encoding="utf-8"
    )
    return files


def main() -> int:
    """Write the generated files and drop CRDs the repository no longer has."""
    expected = expected_files()
    for stale in (CHART / "crds").glob("*.yaml"):
        if stale not in expected:
            stale.unlink()
            print(f"removed {stale.relative_to(REPO)}")
    for path, text in expected.items():
        path.parent.mkdir(parents=True, exist_ok=True)
        if not path.exists() or path.read_text(encoding="utf-8") != text:
            path.write_text(text, encoding="utf-8")
            print(f"wrote {path.relative_to(REPO)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
