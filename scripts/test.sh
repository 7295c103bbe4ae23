#!/usr/bin/env bash
# The project's test command: installs what the tests need when it is missing, then
# runs the whole suite. `.ci/run` runs exactly this script.
#
#   scripts/test.sh [ARGS...]     (ARGS go to `cargo test --workspace --no-fail-fast`)
#
# After the Rust tests, scripts/package.sh builds the Debian packages (release; it
# installs cargo-deb with `cargo install` where missing) and, as root,
# scripts/package-test.sh installs, checks and removes them; then
# `tranche-nemesis guide` runs the packages guide with them on the test bed's hosts.
#
# Then the Python SDK's suites (python/tests: the SDK against
# `tranche dev`, the OpenAPI document, schemathesis) run in a virtualenv this script
# makes under the cargo target dir and fills from PyPI (pytest,
# schemathesis, openapi-spec-validator, mypy, which checks the SDK's types first;
# selenium, for the dashboard's tests in chromium; boto3, awscli and sagemaker-train,
# for the AWS Batch-compatible endpoint's tests). TRANCHE_SKIP_PYTHON=1 leaves them out.
#
# As root, missing Debian packages are installed with apt-get before any test runs:
# runc and a static busybox for the container tests, chromium and chromium-driver for
# the dashboard's browser tests, iproute2, nftables, iptables and faketime for the
# nemesis's test bed.
# Without root nothing is installed, and the tests that need those tools say so on
# stderr and are skipped (the test bed's say NOT RUN);
# under CI=true a test that cannot run as root fails instead of skipping.
set -euo pipefail
cd "$(dirname "$0")/.."

# No test may leave a test bed of the nemesis behind (docs/testing.md): no network
# namespace, interface, nft table, netem qdisc, iptables rule (a delay's, commented
# trb-<pid>-delay), mount or process of one (their names and directories start with
# trb-<pid>-). Checked when the script ends, however it ends.
beds_left() {
  local left
  left=$({
    ip netns list 2>/dev/null | grep -E '^trb-[0-9]+-'
    ip -o link show 2>/dev/null | grep -E '^[0-9]+: trb-'
    nft list tables 2>/dev/null | grep -E ' trb$'
    tc qdisc show 2>/dev/null | grep -w netem
    iptables-save 2>/dev/null | grep -E -- '--comment "?trb-[0-9]+-'
    grep -E '^tmpfs [^ ]*/trb-[0-9]+-' /proc/self/mounts
    local f
    for f in $(grep -lsaE '/trb-[0-9]+-' /proc/[0-9]*/cmdline); do
      echo "process ${f//[^0-9]/}: $(tr '\0' ' ' <"$f" 2>/dev/null)"
    done
  } || true)
  [[ -z $left ]] && return 0
  echo "test.sh: a test bed was left behind:" >&2
  echo "$left" >&2
  return 1
}
trap 'rc=$?; beds_left || rc=1; exit $rc' EXIT

need=()
command -v runc >/dev/null 2>&1 || need+=(runc)
# The package test checks the installed units with systemd-analyze verify.
command -v systemd-analyze >/dev/null 2>&1 || need+=(systemd)
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
# The nemesis's test bed: hosts as network namespaces (iproute2), and the network
# faults among them (nftables)...
command -v ip >/dev/null 2>&1 || need+=(iproute2)
command -v nft >/dev/null 2>&1 || need+=(nftables)
# ...its delays (iptables, whose NFQUEUE target holds a host's packets)...
command -v iptables >/dev/null 2>&1 || need+=(iptables)
# ...and its skewed clocks (libfaketime, which faketime pulls in).
command -v faketime >/dev/null 2>&1 || need+=(faketime)
# The log relay's slow-reader test (agent_e2e) reads through curl.
command -v curl >/dev/null 2>&1 || need+=(curl)
# Debian's python3 makes virtualenvs only with python3-venv (ensurepip).
if [[ ${TRANCHE_SKIP_PYTHON:-0} != 1 ]] && ! python3 -c 'import ensurepip' >/dev/null 2>&1; then
  need+=(python3-venv)
fi

# The dashboard's browser tests (python/tests/test_dashboard.py) drive Debian's
# chromium through chromium-driver.
if [[ ${TRANCHE_SKIP_PYTHON:-0} != 1 ]]; then
  command -v chromium >/dev/null 2>&1 || need+=(chromium)
  command -v chromedriver >/dev/null 2>&1 || need+=(chromium-driver)
fi

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

# A one-off build (CI's clean checkout) gains nothing from incremental state, which
# would only take disk.
[[ ${CI:-} == true ]] && export CARGO_INCREMENTAL=${CARGO_INCREMENTAL:-0}
cargo test --workspace --no-fail-fast "$@"

# The Debian packages: built (release) by scripts/package.sh, then, as root, installed,
# checked and removed by scripts/package-test.sh (docs/operations/packages.md). The
# suite makes no other release build: on 2 cores this adds 6.5 minutes with a cold
# target dir (the release build of the three binaries) and 25 s once it is built;
# installing cargo-deb where it is missing took another 1.5 minutes.
target=${CARGO_TARGET_DIR:-target}
scripts/package.sh "$target/debian" >/dev/null
# A step's exit status: 77 is NOT RUN (a failure under CI=true), any other but 0 ends
# the suite.
step_rc() {
  local rc=$1 what=$2
  if ((rc == 77)); then
    [[ ${CI:-} == true ]] && { echo "test.sh: CI=true, and $what cannot run" >&2; exit 1; }
    echo "test.sh: $what was NOT RUN (see above)" >&2
  elif ((rc != 0)); then
    exit "$rc"
  fi
}
pkg_rc=0
scripts/package-test.sh "$target/debian" || pkg_rc=$?
step_rc "$pkg_rc" "the package install/remove test"
# The packages guide (docs/operations/packages.md) on the test bed's hosts, with the
# packages just built: about a minute (docs/testing.md).
cargo build -q -p tranche-nemesis
guide_rc=0
"$target/debug/tranche-nemesis" guide --debs "$target/debian" || guide_rc=$?
step_rc "$guide_rc" "the packages guide on the test bed"
# A run that fails midway, its daemons up, leaves nothing either: status 1 (3 says the
# teardown left something, or the machine changed).
if ((guide_rc == 0)); then
  fail_rc=0
  "$target/debug/tranche-nemesis" guide --debs "$target/debian" --fail-after 5 \
    >"$target/guide-fail.log" 2>&1 || fail_rc=$?
  if ((fail_rc != 1)); then
    cat "$target/guide-fail.log" >&2
    echo "test.sh: the guide failing on purpose ended with status $fail_rc, not 1" >&2
    exit 1
  fi
fi

[[ ${TRANCHE_SKIP_PYTHON:-0} == 1 ]] && exit 0
cargo build -p tranche-cli -p tranched -p tranche-agent
venv=$target/py-venv
if [[ ! -x $venv/bin/python ]]; then
  python3 -m venv "$venv"
fi
"$venv/bin/python" -m pip install -q --disable-pip-version-check -e "python[test]"
"$venv/bin/python" -m mypy --strict python/tranche
TRANCHE_BIN=$(cd "$target" && pwd)/debug/tranche "$venv/bin/python" -m pytest -q -rs python/tests
