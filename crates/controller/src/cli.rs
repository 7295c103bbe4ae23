//! `tranched --config FILE`: the controller's command line (also reachable through
//! the `tranche` binary invoked as `tranched`).

use std::path::PathBuf;

use clap::Parser;
use tokio::sync::watch;

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
    crate::alloc::use_mimalloc();
    let args = Args::parse();
    let filter = tracing_subscriber::EnvFilter::try_from_env("TRANCHE_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info,raft=warn"));
    if args.json_logs {
        tracing_subscriber::fmt()
            .json()
            .with_env_filter(filter)
            .init();
    } else {
        // Colours only on a terminal: a log file or journal gets plain text.
        use std::io::IsTerminal;
        tracing_subscriber::fmt()
            .with_ansi(std::io::stdout().is_terminal())
            .with_env_filter(filter)
            .init();
    }
    let cfg = match crate::Config::load(&args.config) {
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
        let (tx, rx) = watch::channel(false);
        tokio::spawn(async move {
            use tokio::signal::unix::{signal, SignalKind};
            let mut term = signal(SignalKind::terminate()).expect("SIGTERM handler");
            let mut int = signal(SignalKind::interrupt()).expect("SIGINT handler");
            tokio::select! {
                _ = term.recv() => tracing::info!("SIGTERM: stopping"),
                _ = int.recv() => tracing::info!("SIGINT: stopping"),
            }
            let _ = tx.send(true);
        });
        match crate::server::run(cfg, rx).await {
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
