//! `tranched --config FILE`: the Tranche controller's binary, and its composition
//! root. It parses the command line ([`cli`]), opens the replicated service
//! (`tranche_controller::server::open`), puts the HTTPS API (`tranche-http`) and the
//! AWS Batch-compatible endpoint (`tranche-aws`) on top of it ([`compose`]), and runs
//! it until SIGTERM or SIGINT.
//!
//! It may depend on every crate of the controller side (`tranche-controller`,
//! `tranche-http`, `tranche-aws`, `tranche-daemon-kit`) and holds no logic of its own
//! beyond their wiring: a rule of the service belongs in the controller, a route in
//! the adapter that serves it.

mod cli;
mod compose;

/// A long-running daemon allocates from many threads: mimalloc.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() {
    // First, before any thread: the ports handed over by whoever started it.
    tranche_daemon_kit::listen::take_inherited();
    cli::main()
}
