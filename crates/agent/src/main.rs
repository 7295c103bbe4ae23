//! `tranche-agent`: the node agent.

fn main() -> std::process::ExitCode {
    // First, before any thread: the ports handed over by whoever started it.
    tranche_daemon_kit::listen::take_inherited();
    tranche_agent::cli::main()
}
