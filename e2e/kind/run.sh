#!/usr/bin/env bash
# make e2e-kind: run the integration suite against a kind cluster (needs Docker and kind).
#
#   KIND_CLUSTER_NAME   cluster name (default tailguard-e2e); an existing one is reused and kept
#   KIND_NODE_IMAGE     node image (default: the one your kind release pins)
#   KEEP_KIND_CLUSTER=1 keep a cluster this script created
#   TAILGUARD_FAKE_NODES=0  use the cluster's own GPU nodes instead of kwok's fake ones
# Extra arguments go to pytest (e.g. -k reconcile -x).
set -euo pipefail
cd "$(dirname "$0")/../.."

PY=${PY:-.venv/bin/python}
NAME=${KIND_CLUSTER_NAME:-tailguard-e2e}
STATE=${TAILGUARD_KIND_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/tailguard/kind/$NAME}

command -v kind >/dev/null || { echo "e2e-kind: kind is not installed (go install sigs.k8s.io/kind@latest)" >&2; exit 2; }
docker info >/dev/null 2>&1 || { echo "e2e-kind: no Docker engine answers 'docker info'" >&2; exit 2; }

mkdir -p "$STATE"
kubeconfig="$STATE/kubeconfig"
created=0
if kind get clusters 2>/dev/null | grep -qx "$NAME"; then
  echo ">> reusing kind cluster $NAME"
  kind get kubeconfig --name "$NAME" >"$kubeconfig"
else
  echo ">> creating kind cluster $NAME"
  kind create cluster --name "$NAME" --config e2e/kind/kind-config.yaml --kubeconfig "$kubeconfig" \
    ${KIND_NODE_IMAGE:+--image "$KIND_NODE_IMAGE"} --wait 180s
  created=1
fi
cleanup() {
  if [[ $created == 1 && -z "${KEEP_KIND_CLUSTER:-}" ]]; then
    echo ">> deleting kind cluster $NAME"
    kind delete cluster --name "$NAME"
  fi
}
trap cleanup EXIT

if [[ "${TAILGUARD_FAKE_NODES:-4}" != 0 ]]; then
  # Only kwok is needed here: the control plane is kind's.
  PYTHONPATH=e2e "$PY" -m cluster tools --only kwok
fi

echo ">> integration suite against $kubeconfig"
TAILGUARD_KUBECONFIG="$kubeconfig" TAILGUARD_REQUIRE_CLUSTER=1 \
  "$(dirname "$PY")/pytest" e2e/integration -m integration "$@"
