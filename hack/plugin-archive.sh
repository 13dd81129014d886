#!/usr/bin/env bash
# Builds build/kubectl-gangkeeper.tar.gz, the archive plugins/krew/gangkeeper.yaml points at, byte for
# byte the same on every machine (sorted, fixed mtime and owner, gzip without a name or time), and
# writes its sha256 into the manifest. Publish the archive as a release asset at the manifest's uri.
#   hack/plugin-archive.sh [--check]   --check: fail if the manifest's sha256 is not the archive's
set -euo pipefail
cd "$(dirname "$0")/.."
out="${GK_BUILD_DIR:-build}"
mkdir -p "$out"
archive="$out/kubectl-gangkeeper.tar.gz"
tar --sort=name --mtime=@0 --owner=0 --group=0 --numeric-owner --mode='u+rwX,go+rX,go-w' \
  -C plugins -cf - kubectl-gangkeeper | gzip -n -9 >"$archive"
sum="$(sha256sum "$archive" | cut -d' ' -f1)"
if [[ "${1:-}" == --check ]]; then
  grep -qE "^ *sha256: ${sum}\$" plugins/krew/gangkeeper.yaml ||
    { echo "plugins/krew/gangkeeper.yaml: sha256 is not $archive's ($sum): run make plugin-archive" >&2; exit 1; }
  echo "$archive sha256 $sum matches the manifest"; exit 0
fi
sed -i -E "s/^( *sha256: ).*/\1${sum}/" plugins/krew/gangkeeper.yaml
echo "$archive sha256 $sum (written into plugins/krew/gangkeeper.yaml)"
