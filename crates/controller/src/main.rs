//! `tranched --config FILE`

/// mimalloc keeps freed memory for reuse: a scheduling pass's plan (megabytes on a
/// large cluster) is built in memory the previous pass used, not in fresh pages.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() {
    tranche_controller::cli::main()
}
