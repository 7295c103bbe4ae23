#!/usr/bin/env bash
# The project's test command: installs what the tests need when it is missing, then
# runs the whole suite. `.ci/run` runs exactly this script.
#
#   scripts/test.sh [ARGS...]     (ARGS go to `cargo test --workspace`)
#
# As root, missing Debian packages are installed with apt-get before any test runs:
# runc and a static busybox for the container tests. Without root nothing is
# installed, and the tests that need those tools say so on stderr and are skipped;
# under CI=true a test that cannot run as root fails instead of skipping.
set -euo pipefail
cd "$(dirname "$0")/.."

need=()
command -v runc >/dev/null 2>&1 || need+=(runc)
busybox_static() {
  local bb
  command -v readelf >/dev/null 2>&1 || return 1
  for bb in /bin/busybox /usr/bin/busybox; do
    # A static ELF has no program interpreter.
    [[ -x $bb ]] && ! readelf -l "$bb" 2>/dev/null | grep -q 'program interpreter' && return 0
  done
  return 1
}
busybox_static || need+=(busybox-static)

if ((${#need[@]})); then
  if [[ $(id -u) -eq 0 ]]; then
    echo "test.sh: installing ${need[*]} (apt-get)" >&2
    export DEBIAN_FRONTEND=noninteractive
    apt-get install -y -qq "${need[@]}" >/dev/null \
      || { apt-get update -qq && apt-get install -y -qq "${need[@]}" >/dev/null; } \
      || echo "test.sh: apt-get install ${need[*]} failed; the tests that need them will say so" >&2
  else
    echo "test.sh: not root, so ${need[*]} cannot be installed; the tests that need them will be skipped" >&2
  fi
fi

exec cargo test --workspace "$@"
