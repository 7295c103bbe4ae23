#!/usr/bin/env bash
# Builds Tranche's Debian packages (release) with cargo-deb:
#
#   scripts/package.sh [OUT_DIR]     (default: <cargo target dir>/debian)
#
# writes tranche_<version>_<arch>.deb (the CLI), tranched_... (the controller) and
# tranche-agent_... (the node agent) into OUT_DIR and prints their paths. cargo-deb is
# installed with `cargo install` where missing. What the packages hold, and how to
# install a cluster from them: docs/operations/packages.md. scripts/package-test.sh
# installs and removes them on this machine.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
target=${CARGO_TARGET_DIR:-$root/target}
out=${1:-$target/debian}

if ! cargo deb --version >/dev/null 2>&1; then
  echo "package.sh: installing cargo-deb (cargo install)" >&2
  cargo install cargo-deb --locked --version '^3.8'
fi

# One build for the three binaries; cargo-deb then only packs (--no-build). Under CI
# the build keeps no debug info (the packed binaries are stripped anyway), which keeps
# the suite's target dir small on a shared disk.
[[ ${CI:-} == true ]] && export CARGO_PROFILE_RELEASE_DEBUG=${CARGO_PROFILE_RELEASE_DEBUG:-0}
cargo build --release -p tranched -p tranche-agent -p tranche-cli
mkdir -p "$out"
for crate in tranche-cli tranched tranche-agent; do
  # --strip: the release profile keeps limited debug info (debug = 1) for backtraces in
  # benchmarks; the packaged binaries drop them.
  cargo deb --no-build --strip --no-dbgsym -p "$crate" -o "$out" >/dev/null
done
version=$(cargo metadata --no-deps --format-version 1 \
  | python3 -c 'import json,sys; print(next(p["version"] for p in json.load(sys.stdin)["packages"] if p["name"] == "tranched"))')
arch=$(dpkg --print-architecture 2>/dev/null || echo amd64)
for pkg in tranche tranched tranche-agent; do
  deb=$out/${pkg}_${version}-1_${arch}.deb
  [[ -f $deb ]] || { echo "package.sh: $deb was not made" >&2; exit 1; }
  echo "$deb"
done
