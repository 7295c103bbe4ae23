//! `tranche bench`: the benchmarks of `tranche-bench`, with its arguments.

use std::process::ExitCode;

pub use tranche_bench::BenchCmd;

pub fn bench(cmd: BenchCmd) -> ExitCode {
    tranche_bench::run(cmd)
}
