#!/usr/bin/env bash
# `make image` where no Docker engine runs: the Dockerfile's image built from Debian's own tools.
#   hack/image.sh [OUT_DIR]          (default build/image; needs root, mmdebstrap, umoci, skopeo)
# 1. mmdebstrap: a Debian 12 root with python3.11 (the base the Dockerfile's distroless image is made of);
# 2. from it, only what the runtime needs is copied into a fresh root, as distroless does: the
#    interpreter, its standard library, the shared libraries they link (ldd), the CA bundle, passwd
#    and group with the nonroot user 65532; no shell, no package manager;
# 3. the locked dependencies (requirements.lock, with hashes) and the package into /opt/gangkeeper,
#    exactly as the Dockerfile's build stage does, compiled with unchecked-hash pycs;
# 4. umoci: one layer and the Dockerfile's config (user, entrypoint, cmd, env, ports) into an OCI
#    layout; skopeo: the same as a `docker load`-able archive.
# Reproducible: package versions from hack/image.lock (a changed Debian point release fails loudly; refresh
# the lock), every mtime and the image's dates at SOURCE_DATE_EPOCH (the last commit's time), files
# owned by root in a sorted layer: the same inputs give the same digest (tests/real/test_image.py checks it).
set -euo pipefail
cd "$(dirname "$0")/.."
OUT="${1:-build/image}"
TAG="${TAG:-0.1.0}"
NAME="${IMAGE_NAME:-ghcr.io/gangkeeper/gangkeeper}"
MIRROR="${DEBIAN_MIRROR:-http://deb.debian.org}"  # bookworm, its updates and its security fixes
export SOURCE_DATE_EPOCH="${SOURCE_DATE_EPOCH:-$(git log -1 --format=%ct 2>/dev/null || echo 0)}"
for tool in mmdebstrap umoci skopeo; do
  command -v "$tool" >/dev/null || { echo "image: $tool not found (apt-get install mmdebstrap umoci skopeo)" >&2; exit 2; }
done
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
mapfile -t packages < <(grep -v '^#' hack/image.lock | sed '/^$/d')

echo "image: Debian 12 root with ${packages[*]}" >&2
mmdebstrap --quiet --variant=essential --mode=root --include="$(IFS=,; echo "${packages[*]}")" \
  bookworm "$work/debian" "deb $MIRROR/debian bookworm main" "deb $MIRROR/debian bookworm-updates main" \
  "deb $MIRROR/debian-security bookworm-security main"
for pinned in "${packages[@]}"; do  # what was installed is what the lock says
  name="${pinned%%=*}" want="${pinned#*=}"
  got="$(chroot "$work/debian" dpkg-query -W -f='${Version}' "$name")"
  [[ "$got" == "$want" ]] || { echo "image: $name is $got, hack/image.lock says $want: refresh the lock" >&2; exit 1; }
done

echo "image: requirements.lock and the package into /opt/gangkeeper" >&2
# the project's venv (make's): Python 3.11 as the image's, and the build backend pyproject.toml names
PY="${PYTHON:-.venv/bin/python}"
"$PY" -m pip install -q --disable-pip-version-check --no-cache-dir --require-hashes --no-deps \
  --target "$work/debian/opt/gangkeeper" -r requirements.lock
"$PY" -m pip install -q --disable-pip-version-check --no-cache-dir --no-deps --no-build-isolation \
  --target "$work/debian/opt/gangkeeper" .
rm -rf "$work/debian/opt/gangkeeper/bin"

root="$work/root"
mkdir -p "$root"/{etc,tmp,usr/bin,usr/lib,usr/lib64,opt/gangkeeper}
chmod 1777 "$root/tmp"
for merged in bin lib lib64; do ln -s "usr/$merged" "$root/$merged"; done  # Debian 12's merged /usr
copy() { (cd "$work/debian" && cp -a --parents "$@" "$root/"); }
copy usr/bin/python3.11 usr/lib/python3.11 etc/ssl/certs/ca-certificates.crt opt/gangkeeper
ln -s python3.11 "$root/usr/bin/python3"
# every shared library the interpreter and the extension modules (its own, and the wheels': libgcc_s for
# Rust ones) link: each name as ldd gives it (under its directory's real path) and the file it resolves to
mapfile -t libs < <(
  { echo /usr/bin/python3.11; (cd "$work/debian" && find usr/lib/python3.11 opt/gangkeeper -name '*.so*' -type f -printf '/%p\n'); } |
    while read -r object; do chroot "$work/debian" ldd "$object" 2>/dev/null || true; done |
    awk '/=> \/(lib|usr)/{print $3} /^\t\/lib/{print $1}' | grep -v '^/opt/' | sort -u
)
for lib in "${libs[@]}"; do
  directory="$(chroot "$work/debian" readlink -f "$(dirname "$lib")")"
  real="$(chroot "$work/debian" readlink -f "$lib")"
  copy "${directory#/}/$(basename "$lib")"
  [[ "$real" == "$directory/$(basename "$lib")" ]] || copy "${real#/}"
done
rm -rf "$root"/usr/lib/python3.11/{test,idlelib,tkinter,ensurepip,lib2to3,turtledemo} "$root"/usr/lib/python3.11/config-*
printf 'root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n' >"$root/etc/passwd"
printf 'root:x:0:\nnonroot:x:65532:\n' >"$root/etc/group"
mkdir -p "$root/home/nonroot" && chown 65532:65532 "$root/home/nonroot"

find "$root/opt/gangkeeper" -name '__pycache__' -prune -exec rm -rf {} +
chroot "$root" /usr/bin/python3.11 -m compileall -q --invalidation-mode unchecked-hash /opt/gangkeeper /usr/lib/python3.11
find "$root" -exec touch -h -d "@$SOURCE_DATE_EPOCH" {} +

echo "image: OCI layout and archive in $OUT" >&2
rm -rf "$OUT" && mkdir -p "$OUT"
created="$(date -u -d "@$SOURCE_DATE_EPOCH" +%Y-%m-%dT%H:%M:%SZ)"
umoci init --layout "$OUT/oci"
umoci new --image "$OUT/oci:$TAG"
umoci insert --image "$OUT/oci:$TAG" --history.created "$created" --history.created_by "hack/image.sh" "$root" /
umoci config --image "$OUT/oci:$TAG" --created "$created" --history.created "$created" \
  --config.user 65532:65532 \
  --config.entrypoint python3 --config.entrypoint -m --config.entrypoint webhook \
  --config.cmd serve --config.cmd --host=0.0.0.0 \
  --config.env PATH=/usr/local/bin:/usr/bin:/bin --config.env PYTHONPATH=/opt/gangkeeper \
  --config.env PYTHONDONTWRITEBYTECODE=1 --config.env PYTHONUNBUFFERED=1 \
  --config.exposedports 8443/tcp --config.exposedports 8080/tcp \
  --config.workingdir / --architecture amd64 --os linux
umoci gc --layout "$OUT/oci"
skopeo copy --quiet "oci:$OUT/oci:$TAG" "docker-archive:$OUT/gangkeeper.tar:$NAME:$TAG"
digest="$(skopeo inspect --format '{{.Digest}}' "oci:$OUT/oci:$TAG")"
echo "$digest" >"$OUT/digest"
echo "image: $NAME:$TAG $digest ($(du -sh "$OUT/gangkeeper.tar" | cut -f1) archive)" >&2
