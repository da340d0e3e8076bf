#!/usr/bin/env bash
# make e2e-kind: run the integration suite against the kind cluster built on this machine
# (make kind-up: kind, its node image and every image in it built here; see docs/testing.md).
#
#   KIND_CLUSTER_NAME   cluster name (default tailguard); an existing one is reused and kept
#   KEEP_KIND_CLUSTER=1 keep a cluster this script created
#   TAILGUARD_FAKE_NODES=0  no kwok: the kind node advertises TAILGUARD_KIND_GPUS (default 8) fake GPUs
#                       itself, and pods placed there really run (their images must be loaded)
#   KIND_IMAGES         images to `kind load` first (default: the operator and engine stand-in images)
# Extra arguments go to pytest (e.g. -k reconcile -x).
set -euo pipefail
cd "$(dirname "$0")/../.."

PY=${PY:-.venv/bin/python}
export TAILGUARD_KIND_CLUSTER=${KIND_CLUSTER_NAME:-tailguard}
harness() { PYTHONPATH=e2e "$PY" -m containers "$@"; }

docker info >/dev/null 2>&1 || { echo "e2e-kind: no Docker engine answers 'docker info' (make docker-up)" >&2; exit 2; }

kind=$(PYTHONPATH=e2e "$PY" -c 'from cluster import tools; tools.ensure_components(["kind"], progress=lambda m: None); print(tools.KIND.path("kind"))')
created=0
if "$kind" get clusters 2>/dev/null | grep -qx "$TAILGUARD_KIND_CLUSTER"; then
  echo ">> reusing kind cluster $TAILGUARD_KIND_CLUSTER"
else
  created=1
fi
cleanup() {
  if [[ $created == 1 && -z "${KEEP_KIND_CLUSTER:-}" ]]; then
    echo ">> deleting kind cluster $TAILGUARD_KIND_CLUSTER"
    harness kind-down
  fi
}
trap cleanup EXIT

# The suite's GPUs are kwok's fake nodes (started by the test session on the host against this
# API server), so the kind node advertises none: pods that request GPUs land only on kwok's nodes,
# which mark them Running without running them.
gpus=0
[[ "${TAILGUARD_FAKE_NODES:-4}" == 0 ]] && gpus=${TAILGUARD_KIND_GPUS:-8}
harness kind-up --gpus "$gpus"
kubeconfig=$(harness kind-env | sed -n 's/^export KUBECONFIG=//p')

images=${KIND_IMAGES-"tailguard/operator:0.1.0 tailguard/engine-standin:0.1.0"}
if [[ -n "$images" ]]; then
  # shellcheck disable=SC2086
  harness kind-load $images
fi

if [[ "${TAILGUARD_FAKE_NODES:-4}" != 0 ]]; then
  # Only kwok is needed here: the control plane is kind's.
  PYTHONPATH=e2e "$PY" -m cluster tools --only kwok
fi

echo ">> integration suite against $kubeconfig"
TAILGUARD_KUBECONFIG="$kubeconfig" TAILGUARD_REQUIRE_CLUSTER=1 \
  "$(dirname "$PY")/pytest" e2e/integration -m integration "$@"
