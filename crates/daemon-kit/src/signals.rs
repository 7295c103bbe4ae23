//! SIGTERM and SIGINT as a shutdown: a watch that turns true on the first of them.

use tokio::sync::watch;

/// A receiver that turns true on SIGTERM or SIGINT (logged). Call it inside a tokio
/// runtime.
pub fn shutdown_on_signals() -> watch::Receiver<bool> {
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
    rx
}
