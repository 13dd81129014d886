#!/usr/bin/env bash
# Builds the real Kubernetes components gangkeeper's cluster tier runs, from the Go module proxy.
#   hack/cluster/build.sh [k8s VERSION...] [etcd] [kwok] [lws] [jobset] [scheduler-plugins] [volcano] [helm] [promtool] [kuberay] [training-operator] [karpenter] [kueue] [core] [rest] [default] [all]
# Each lands in $GK_CACHE/bin/<name>-<version>/ (default ~/.cache/gangkeeper, outside the clone so a
# fresh clone on the same machine reuses it) and is rebuilt only when its version changes.
# Modules whose go.mod uses replace directives (k8s.io/kubernetes, etcd, scheduler-plugins) cannot be
# `go install`ed: each is built from a generated module of ours that requires it and carries its
# replaces, relative ones turned into the published module of the matching version.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
# shellcheck source=versions.env
source "$here/versions.env"
GK_CACHE="${GK_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/gangkeeper}"
PROXY="${GOPROXY_URL:-https://proxy.golang.org}"
# one build at a time per cache (a `make cluster` started during another build must wait, not share its
# work directories); the nested calls below inherit the lock
if [[ -z "${GK_BUILD_LOCKED:-}" ]]; then
  mkdir -p "$GK_CACHE"
  exec 9>"$GK_CACHE/.build.lock"
  flock 9
  export GK_BUILD_LOCKED=1
fi
export GOFLAGS="-mod=mod -trimpath" CGO_ENABLED=0 GOTOOLCHAIN="${GOTOOLCHAIN:-local}"

log() { printf '[build %s] %s\n' "$(date +%T)" "$*" >&2; }

# gomod NAME MODULE VERSION STAGING_VERSION: writes the wrapper module's go.mod on stdout.
gomod() {
  local name=$1 module=$2 version=$3 staging=$4 upstream
  upstream="$(curl -fsSL --retry 3 "$PROXY/$module/@v/$version.mod")"
  printf 'module gangkeeper.local/build/%s\n\n' "$name"
  grep -m1 -E '^go [0-9.]+' <<<"$upstream"
  printf '\nrequire %s %s\n\nreplace (\n' "$module" "$version"
  # one replace per line, in or out of a block; drop the FORBIDDEN_DEPENDENCY guard
  awk '/^replace \(/{b=1;next} b&&/^\)/{b=0;next} b{print;next} /^replace /{sub(/^replace /,"");print}' <<<"$upstream" |
    { grep '=>' || true; } | { grep -v FORBIDDEN || true; } | while read -r path _ target tver; do
      case "$target" in
        ./staging/src/*) printf '\t%s => %s %s\n' "$path" "$path" "$staging" ;;
        ../*|./*) printf '\t%s => %s %s\n' "$path" "$path" "$version" ;;
        *) printf '\t%s => %s %s\n' "$path" "$target" "$tver" ;;
      esac
    done
  printf ')\n'
}

# build NAME MODULE VERSION STAGING_VERSION LDFLAGS PKG...
build() {
  local name=$1 module=$2 version=$3 staging=$4 ldflags=$5; shift 5
  local out="$GK_CACHE/bin/$name-${version#v}" work="$GK_CACHE/work/$name-${version#v}"
  if [[ -f "$out/.complete" ]]; then log "$name $version cached in $out"; return; fi
  log "$name $version: building ${*##*/}"
  local start=$SECONDS
  rm -rf "$work" "$out"; mkdir -p "$work" "$out"
  gomod "$name" "$module" "$version" "$staging" >"$work/go.mod"
  # a Kubernetes patch release the proxy refuses a module of is swapped for a served one (K8S_PIN=from:to)
  if [[ -n "${K8S_PIN:-}" ]]; then sed -i "/^\tk8s.io\//s/${K8S_PIN%%:*}/${K8S_PIN##*:}/g" "$work/go.mod"; fi
  # no DWARF: the binaries are stripped of it at link (-s -w) anyway, and not generating it cuts the
  # compile's CPU by a sixth (kwok from an empty build cache: 332 -> 278 CPU-seconds)
  (cd "$work" && go build -gcflags=all=-dwarf=false -ldflags "-s -w $ldflags" -o "$out/" "$@")
  printf '%s %s built in %ss\n' "$name" "$version" "$((SECONDS - start))" | tee "$out/.complete" >&2
}

# module_build NAME MODULE VERSION PKG...: built inside the module's own source from the proxy (a module
# whose go.mod has no replace directives). Its `go` line may name a later patch release of the local
# toolchain's minor (Karpenter v1.15.0: go 1.26.9, here 1.26.8), which GOTOOLCHAIN=local refuses and no
# toolchain can be downloaded here: that line is lowered to the local release, as patch releases add no
# language features.
module_build() {
  local name=$1 module=$2 version=$3; shift 3
  local out="$GK_CACHE/bin/$name-${version#v}" work="$GK_CACHE/work/$name-${version#v}"
  if [[ -f "$out/.complete" ]]; then log "$name $version cached in $out"; return; fi
  log "$name $version: building ${*##*/} in the module's source"
  local start=$SECONDS local_go
  rm -rf "$work" "$out"; mkdir -p "$work" "$out"
  curl -fsSL --retry 3 -o "$work/src.zip" "$PROXY/$module/@v/$version.zip"
  (cd "$work" && unzip -q src.zip && rm src.zip)
  local src="$work/$module@$version"
  chmod -R u+w "$src"
  local_go="$(go env GOVERSION)"; local_go="${local_go#go}"
  awk -v local="$local_go" '
    /^go [0-9.]+$/ { split($2, want, "."); split(local, have, ".");
      if (want[1] == have[1] && want[2] == have[2] && want[3] + 0 > have[3] + 0) { print "go " local; next } }
    /^toolchain / { next } { print }' "$src/go.mod" >"$src/go.mod.local" && mv "$src/go.mod.local" "$src/go.mod"
  (cd "$src" && go build -gcflags=all=-dwarf=false -ldflags "-s -w" -o "$out/" "$@")
  printf '%s %s built in %ss\n' "$name" "$version" "$((SECONDS - start))" | tee "$out/.complete" >&2
}

# debian NAME PACKAGE VERSION SHA256 PATH: one binary out of a Debian package from the mirror's pool
debian() {
  if ! command -v dpkg-deb >/dev/null; then log "$1: not a Debian machine, not fetched (its tests skip)"; return; fi
  local name=$1 package=$2 version=$3 sha=$4 path=$5 arch; arch="$(dpkg --print-architecture)"
  local out="$GK_CACHE/bin/$name-$version" deb="$GK_CACHE/work/${package}_${version}_$arch.deb"
  if [[ -f "$out/.complete" ]]; then log "$name $version cached in $out"; return; fi
  log "$name $version: from Debian's $package"
  rm -rf "$out" "$out.x"; mkdir -p "$out" "$GK_CACHE/work"
  curl -fsSL --retry 3 -o "$deb" "${DEBIAN_MIRROR:-http://deb.debian.org}/debian/pool/main/${package:0:1}/$package/${package}_${version}_$arch.deb"
  echo "${sha:?no sha256 for $arch in versions.env}  $deb" | sha256sum -c --quiet
  dpkg-deb -x "$deb" "$out.x" && mv "$out.x/$path" "$out/" && rm -rf "$out.x" "$deb"
  printf '%s %s from Debian\n' "$name" "$version" | tee "$out/.complete" >&2
}

# rename DIR FROM TO: go names a binary after its package directory (server, cmd)
rename() { [[ -f "$1/$2" ]] && mv "$1/$2" "$1/$3"; return 0; }

k8s() {
  local v=$1 minor; minor="$(cut -d. -f2 <<<"$v")"
  local vpkg=k8s.io/component-base/version cpkg=k8s.io/client-go/pkg/version ld=""
  for p in $vpkg $cpkg; do
    ld+=" -X $p.gitVersion=v$v -X $p.gitMajor=1 -X $p.gitMinor=$minor -X $p.gitTreeState=clean"
    ld+=" -X $p.buildDate=1970-01-01T00:00:00Z"
  done
  # kubectl only with the default version: kubectl works with the API servers one minor either side of
  # it (the version skew policy), which are the other versions built; ~1.5 minutes of a cold build less
  local kubectl=(); [[ "$v" == "$K8S_DEFAULT" ]] && kubectl=(k8s.io/kubernetes/cmd/kubectl)
  build kubernetes k8s.io/kubernetes "v$v" "v0.$minor.${v##*.}" "$ld" \
    k8s.io/kubernetes/cmd/kube-apiserver k8s.io/kubernetes/cmd/kube-controller-manager \
    k8s.io/kubernetes/cmd/kube-scheduler "${kubectl[@]}"
}

# kube-scheduler's CEL for device selectors (hack/celoracle), in the Kubernetes module the tier runs:
# tests/real/test_real_cel.py holds gangkeeper's evaluator to it. Rebuilt when its source changes.
celoracle() {
  local v=$K8S_DEFAULT minor; minor="$(cut -d. -f2 <<<"$v")"
  local src="$here/../celoracle/main.go" sum out="$GK_CACHE/bin/celoracle-$v" work="$GK_CACHE/work/celoracle-$v"
  sum="$(sha256sum "$src" | cut -c1-16)"
  if grep -qs "$sum" "$out/.complete"; then log "celoracle $v cached in $out"; return; fi
  local start=$SECONDS
  rm -rf "$work" "$out"; mkdir -p "$work/celoracle" "$out"
  gomod celoracle k8s.io/kubernetes "v$v" "v0.$minor.${v##*.}" >"$work/go.mod"
  cp "$src" "$work/celoracle/"
  (cd "$work" && go build -gcflags=all=-dwarf=false -ldflags "-s -w" -o "$out/celoracle" ./celoracle)
  printf 'celoracle %s %s built in %ss\n' "$v" "$sum" "$((SECONDS - start))" | tee "$out/.complete" >&2
}

targets=("$@"); [[ ${#targets[@]} -eq 0 ]] && targets=(default)
for t in "${targets[@]}"; do
  case "$t" in
    default) "$0" core rest ;;
    # what most tests need (the default control plane; the chart's helm and promtool), then the rest, which
    # hack/test.sh builds beside the tests that do not need it: LWS and JobSet (the shared stack's
    # operators), scheduler-plugins, the newest Kubernetes, Volcano, KubeRay, training-operator
    core) k8s "$K8S_DEFAULT"; "$0" celoracle etcd kwok helm promtool provisioning-crd ;;
    rest) "$0" lws jobset scheduler-plugins; k8s "$K8S_NEWEST"; "$0" volcano kuberay training-operator karpenter kueue ;;
    all) for v in $K8S_VERSIONS; do k8s "$v"; done; "$0" celoracle etcd kwok lws jobset scheduler-plugins volcano helm promtool provisioning-crd kuberay training-operator karpenter kueue ;;
    # the ProvisioningRequest CRD, from Cluster Autoscaler's apis module (a download, nothing to build)
    provisioning-crd) crd="$GK_CACHE/crds/provisioningrequests-$CA_APIS_VERSION.yaml"
                      if [[ -f "$crd" ]]; then log "provisioning-crd $CA_APIS_VERSION cached in $crd"; continue; fi
                      dir="$(cd /tmp && GOFLAGS=-mod=mod go mod download -json "k8s.io/autoscaler/cluster-autoscaler/apis@$CA_APIS_VERSION" |
                             sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')"
                      mkdir -p "$GK_CACHE/crds"
                      cp "$dir/config/crd/autoscaling.x-k8s.io_provisioningrequests.yaml" "$crd.tmp" && mv "$crd.tmp" "$crd"
                      log "provisioning-crd $CA_APIS_VERSION from the Go module proxy" ;;
    1.*) k8s "$t" ;;
    celoracle) celoracle ;;
    etcd) build etcd go.etcd.io/etcd/server/v3 "v$ETCD_VERSION" "" "" go.etcd.io/etcd/server/v3
          rename "$GK_CACHE/bin/etcd-$ETCD_VERSION" server etcd ;;
    kwok) build kwok sigs.k8s.io/kwok "v$KWOK_VERSION" "" \
            "-X sigs.k8s.io/kwok/pkg/consts.Version=v$KWOK_VERSION" sigs.k8s.io/kwok/cmd/kwok ;;
    lws) build lws sigs.k8s.io/lws "v$LWS_VERSION" "" "" sigs.k8s.io/lws/cmd
         rename "$GK_CACHE/bin/lws-$LWS_VERSION" cmd lws-manager ;;
    jobset) build jobset sigs.k8s.io/jobset "v$JOBSET_VERSION" "" "" sigs.k8s.io/jobset ;;
    # its go.mod pins k8s.io/* v0.34.7, and the proxy refuses k8s.io/csi-translation-lib v0.34.7
    scheduler-plugins) K8S_PIN="$SCHEDULER_PLUGINS_K8S_PIN" build scheduler-plugins sigs.k8s.io/scheduler-plugins "v$SCHEDULER_PLUGINS_VERSION" "" "" \
            sigs.k8s.io/scheduler-plugins/cmd/scheduler ;;
    volcano) build volcano volcano.sh/volcano "v$VOLCANO_VERSION" "" "" volcano.sh/volcano/cmd/scheduler \
               volcano.sh/volcano/cmd/controller-manager volcano.sh/volcano/cmd/webhook-manager
             for b in scheduler controller-manager webhook-manager; do rename "$GK_CACHE/bin/volcano-$VOLCANO_VERSION" "$b" "vc-$b"; done ;;
    helm) build helm helm.sh/helm/v3 "v$HELM_VERSION" "" "-X helm.sh/helm/v3/internal/version.version=v$HELM_VERSION" \
            helm.sh/helm/v3/cmd/helm ;;
    # checks the chart's alert rules (tests/unit/test_chart.py): promtool test rules
    promtool) sha="PROMTOOL_DEBIAN_SHA256_$(dpkg --print-architecture 2>/dev/null || echo none)"
              debian promtool prometheus "$PROMTOOL_DEBIAN_VERSION" "${!sha:-}" usr/bin/promtool ;;
    # the operators that make Volcano gangs of their own (issue 20): gangkeeper must leave those alone
    kuberay) build kuberay github.com/ray-project/kuberay/ray-operator "v$KUBERAY_VERSION" "" "" \
               github.com/ray-project/kuberay/ray-operator ;;
    # Kueue (issue 49): the admission system most batch users run, beside gangkeeper for real
    kueue) build kueue sigs.k8s.io/kueue "v$KUEUE_VERSION" "" "" sigs.k8s.io/kueue/cmd/kueue ;;
    # Karpenter with its KWOK cloud provider (issue 47): an autoscaler that makes KWOK nodes; its CRDs
    # (karpenter.sh, and the KWOKNodeClass) are kept beside the binary for the real tier to install
    karpenter) module_build karpenter sigs.k8s.io/karpenter "v$KARPENTER_VERSION" ./kwok
               src="$GK_CACHE/work/karpenter-$KARPENTER_VERSION/sigs.k8s.io/karpenter@v$KARPENTER_VERSION"
               if [[ -d "$src" ]]; then
                 mkdir -p "$GK_CACHE/bin/karpenter-$KARPENTER_VERSION/crds"
                 cp "$src"/kwok/charts/crds/*.yaml "$src"/kwok/apis/crds/*.yaml "$GK_CACHE/bin/karpenter-$KARPENTER_VERSION/crds/"
                 rename "$GK_CACHE/bin/karpenter-$KARPENTER_VERSION" kwok karpenter
               fi ;;
    training-operator) build training-operator github.com/kubeflow/training-operator "v$TRAINING_OPERATOR_VERSION" "" "" \
               github.com/kubeflow/training-operator/cmd/training-operator.v1
             rename "$GK_CACHE/bin/training-operator-$TRAINING_OPERATOR_VERSION" training-operator.v1 training-operator ;;
    *) echo "unknown target $t" >&2; exit 2 ;;
  esac
done
