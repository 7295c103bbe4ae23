//! `tranche completions`: shell completions, from the clap definition of every command.

use std::process::ExitCode;

/// Writes the completions of `cli` for `shell` to stdout.
pub fn completions(shell: clap_complete::Shell, mut cli: clap::Command) -> ExitCode {
    clap_complete::generate(shell, &mut cli, "tranche", &mut std::io::stdout());
    ExitCode::SUCCESS
}
