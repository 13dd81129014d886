#!/usr/bin/env bash
# Debian's tools that build and run the image without Docker (hack/image.sh, tests/real/test_image.py):
# installed when missing, on a Debian machine where this runs as root; elsewhere the image tests skip
# and say why.
set -euo pipefail
tools=(mmdebstrap umoci skopeo runc)
missing=()
for tool in "${tools[@]}"; do command -v "$tool" >/dev/null || missing+=("$tool"); done
[[ ${#missing[@]} -eq 0 ]] && exit 0
if [[ $EUID -ne 0 ]] || ! command -v apt-get >/dev/null; then
  echo "image tools: ${missing[*]} missing and not installable here (root and apt-get needed); tests/real/test_image.py skips" >&2
  exit 0
fi
echo "image tools: apt-get install ${missing[*]}" >&2
apt-get update -qq
DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
