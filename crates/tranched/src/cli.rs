//! `tranched --config FILE`: the controller's command line: its arguments, its log,
//! its runtime and its exit status.

use std::path::PathBuf;

use clap::Parser;

#[derive(Parser)]
#[command(
    name = "tranched",
    about = "The Tranche controller (run three or five)",
    after_help = "Example:\n  tranched --config /etc/tranche/controller.toml"
)]
struct Args {
    /// The controller's TOML configuration.
    #[arg(long)]
    config: PathBuf,
    /// Log as JSON lines instead of text.
    #[arg(long)]
    json_logs: bool,
}

/// Parses the command line and runs the controller; exits the process when done.
pub fn main() {
    let args = Args::parse();
    tranche_daemon_kit::logs::init(args.json_logs, "info,raft=warn");
    let cfg = match tranche_controller::Config::load(&args.config) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("tranched: {e}");
            std::process::exit(2);
        }
    };
    // One thread: the Raft loop, QUIC and the API share it, with no hand-offs between
    // threads (the planner and the disk's fsync still have their own).
    let rt = if cfg.threads == 1 {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
    } else {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(cfg.threads)
            .enable_all()
            .build()
    }
    .expect("tokio runtime");
    let code = rt.block_on(async move {
        let rx = tranche_daemon_kit::signals::shutdown_on_signals();
        match crate::compose::run(cfg, rx).await {
            Ok(()) => 0,
            Err(e) => {
                tracing::error!("controller failed: {e}");
                1
            }
        }
    });
    rt.shutdown_timeout(std::time::Duration::from_secs(2));
    std::process::exit(code);
}
