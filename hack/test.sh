#!/usr/bin/env bash
# The test phase of `make test`: the whole suite, with the components only some real-tier tests need
# (hack/cluster/build.sh rest) built beside it instead of before it, at the lowest CPU priority, so a
# fresh machine's first run overlaps the build with the tests that wait on a cluster. A test that needs
# one of them waits for it while this build holds the cache's lock (tests/realcluster/controlplane.py
# `built`); those tests run last (tests/conftest.py). Warm, the build finds everything cached at once.
set -uo pipefail
cd "$(dirname "$0")/.."
BIN="${BIN:-.venv/bin}"
GK_CACHE="${GK_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/gangkeeper}"
mkdir -p build "$GK_CACHE"
log=build/cluster-build-rest.log
# the lock is taken here, before pytest starts, and handed to the build: no test can look for a
# binary in the moment before the build holds it
exec 9>"$GK_CACHE/.build.lock"
flock 9
GK_BUILD_LOCKED=1 nice -n 19 bash hack/cluster/build.sh rest >"$log" 2>&1 &
build=$!
exec 9>&-
status=0
# two workers, each test module on one (--dist loadfile: a module's cluster is started once): the real
# tier mostly waits on its clusters (one worker left the two cores 74% idle), so two side by side take
# about half the time; in tests/conftest.py's order (xdist would put the biggest modules first, the
# modules that wait for the build among them); each worker's clusters and pod sandboxes have addresses of their own (tests/workers.py)
"$BIN/pytest" -q --durations=25 -n "${GK_TEST_WORKERS:-2}" --dist loadfile --no-loadscope-reorder || status=$?
if ! wait "$build"; then
  echo "hack/cluster/build.sh rest failed; the end of $log:" >&2
  tail -n 40 "$log" >&2
  status=1
fi
grep -h ' built in \| from Debian' "$log" >&2 || true
bash hack/scan.sh || status=$?
exit "$status"
