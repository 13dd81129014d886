#!/usr/bin/env bash
# The chart (charts/gangkeeper) is the one source of gangkeeper's manifests. This renders the release
# manifest, manifests/base/gangkeeper.yaml (one `kubectl apply -f`, and the base the kustomize overlays
# patch), with the chart's defaults, the Namespace included and no Helm hooks. tests/unit/test_chart.py fails
# when the committed file differs from a fresh render: run this after changing the chart.
set -euo pipefail
cd "$(dirname "$0")/.."
source hack/cluster/versions.env
helm="${HELM:-${GK_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/gangkeeper}/bin/helm-$HELM_VERSION/helm}"
[[ -x "$helm" ]] || bash hack/cluster/build.sh helm
{
  echo "# Rendered from charts/gangkeeper by hack/render.sh: edit the chart, not this file."
  echo "# kubectl apply -f manifests/base/gangkeeper.yaml   (backend auto; overlays pick one)"
  echo "# The webhook's NetworkPolicy here admits any source on 8443 (no cluster to read the API server's"
  echo "# addresses from): patch its ingress to them, or install the chart, which reads them."
  "$helm" template gangkeeper charts/gangkeeper --namespace gangkeeper-system --no-hooks \
    --kube-version "$K8S_DEFAULT" --set namespace.create=true,networkPolicy.allowAnySource=true
} >manifests/base/gangkeeper.yaml
