#!/usr/bin/env bash
# Security scan of the built manifests and the Dockerfile with checkov. Findings that remain are
# justified next to the resource (checkov.io/skipN annotations); any other finding fails.
set -euo pipefail
cd "$(dirname "$0")/.."
scan_venv=${SCAN_VENV:-.venv-scan}
if [ ! -x "$scan_venv/bin/checkov" ]; then
  python3 -m venv "$scan_venv"
  "$scan_venv/bin/pip" install -q --disable-pip-version-check --require-hashes -r hack/checkov.lock
fi
# offline: no guideline download, no telemetry
export BC_SKIP_MAPPING=TRUE CHECKOV_NO_OUTPUT_TELEMETRY=TRUE
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
for k in base overlays/volcano overlays/coscheduling overlays/native overlays/gate examples; do
  kubectl kustomize "manifests/$k" > "$out/$(echo "$k" | tr / -).yaml"
done
# the chart with every optional object (cert-manager certificates, monitoring, the uninstall hook); no
# cluster to read the API server's addresses from, so one is given (the chart refuses to guess)
source hack/cluster/versions.env
helm="${HELM:-${GK_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/gangkeeper}/bin/helm-$HELM_VERSION/helm}"
[[ -x "$helm" ]] || bash hack/cluster/build.sh helm
"$helm" template gangkeeper charts/gangkeeper --namespace gangkeeper-system --kube-version "$K8S_DEFAULT" \
  --set certificates.mode=cert-manager,metrics.serviceMonitor.enabled=true,metrics.prometheusRule.enabled=true,metrics.grafanaDashboard.enabled=true \
  --set "networkPolicy.apiServerCIDRs={192.0.2.10/32}" \
  > "$out/chart-everything.yaml"
"$scan_venv/bin/checkov" --quiet --compact --skip-download -d "$out" --framework kubernetes
"$scan_venv/bin/checkov" --quiet --compact --skip-download -f Dockerfile --framework dockerfile
echo "checkov: manifests and Dockerfile passed"
