#!/usr/bin/env bash
# Runs Tranche's libFuzzer targets (fuzz/, cargo-fuzz on nightly) with debug
# assertions (overflow checks) and AddressSanitizer.
#
#   scripts/fuzz.sh                  every target, 60 s each
#   scripts/fuzz.sh TARGET [SECONDS] one target
#   scripts/fuzz.sh all SECONDS      every target, SECONDS each
#
# Each target starts from its committed seeds (fuzz/corpus/TARGET) and regression
# inputs (fuzz/regressions/TARGET); what it learns goes to fuzz/target/corpus/TARGET
# (not committed). A crash leaves its input in fuzz/artifacts/TARGET/: fix it, then copy
# the input to fuzz/regressions/TARGET/ so that the smoke run of `cargo test` replays
# it. Extra libFuzzer flags go in $FUZZ_FLAGS (e.g. FUZZ_FLAGS=-jobs=2).
set -euo pipefail
cd "$(dirname "$0")/.."

target=${1:-all}
seconds=${2:-60}
all=$(sed -n 's/^name = "\(.*\)"$/\1/p' fuzz/Cargo.toml | grep -v '^tranche-fuzz$')

if ! cargo +nightly fuzz --version >/dev/null 2>&1; then
    echo "installing cargo-fuzz" >&2
    cargo install cargo-fuzz
fi

if [ "$target" = all ]; then
    targets=$all
elif grep -qx "$target" <<<"$all"; then
    targets=$target
else
    echo "unknown target $target; targets: $(echo $all)" >&2
    exit 2
fi

cargo +nightly fuzz build --debug-assertions
summary=""
failed=0
for t in $targets; do
    work=fuzz/target/corpus/$t
    mkdir -p "$work" "fuzz/regressions/$t"
    log=fuzz/target/fuzz-$t.log
    dict=""
    case $t in *_file) dict=-dict=fuzz/dict/toml.dict ;; esac
    echo "== $t: $seconds s" >&2
    # -rss_limit_mb: a decode may claim up to 512 MiB (a peer frame), so allow more
    # than libFuzzer's 2 GiB default only for peak RSS, not for one allocation.
    if cargo +nightly fuzz run --debug-assertions "$t" "$work" "fuzz/corpus/$t" "fuzz/regressions/$t" -- \
        -max_total_time="$seconds" -rss_limit_mb=4096 -malloc_limit_mb=1024 -timeout=10 \
        -print_final_stats=1 $dict ${FUZZ_FLAGS:-} 2>"$log"; then
        status=ok
    else
        status="CRASH (see $log and fuzz/artifacts/$t/)"
        failed=1
    fi
    runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
    secs=$(sed -n 's/^Done [0-9]* runs in \([0-9]*\) second.*/\1/p' "$log" | tail -1)
    cov=$(grep -o 'cov: [0-9]*' "$log" | tail -1)
    summary+=$(printf '%-14s %10s execs %5s s  %-10s %s' "$t" "${runs:-?}" "${secs:-?}" "${cov:-}" "$status")$'\n'
done
printf '\n%s' "$summary"
exit $failed
