//! `tranche-agent`: the node agent.

fn main() -> std::process::ExitCode {
    tranche_agent::cli::main()
}
