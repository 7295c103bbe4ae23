//! Wires a controller together: storage, the Raft node, the peer transport and the
//! client API's QUIC port ([`open`]), and runs them until shutdown
//! ([`Controller::run`]). Between the two, the binary adds its other adapters (the
//! HTTPS API, the AWS endpoint) over the [`Controller`]'s service.

use std::net::SocketAddr;
use std::sync::{Arc, RwLock};

use tokio::sync::{mpsc, watch};
use tracing::{info, warn};
use tranche_tls::TlsFiles;

use crate::config::Config;
use crate::liveness::Beats;
use crate::mailbox::{NodeError, SharedRef, WorkWatch};
use crate::node::{storage, RaftNode};
use crate::peer::PeerNet;
use crate::quic::ClientPort;
use crate::service::{Isolation, Service};
use tranche_tls::{CertVerifier, ClientStreams, Gate, QuicLimits};

/// A QUIC endpoint listening on `addr`, whose clients open streams of `kind`, with
/// the port limits `limits`; certificates are checked by `certs` (whose revocation
/// list every port shares).
fn endpoint(
    addr: &str,
    files: &TlsFiles,
    certs: &CertVerifier,
    limits: &QuicLimits,
    what: &'static str,
    kind: ClientStreams,
) -> Result<quinn::Endpoint, NodeError> {
    let addr: SocketAddr = addr.parse().map_err(|_| NodeError::Address {
        setting: what,
        addr: addr.to_string(),
    })?;
    let mut server = tranche_tls::server_config_with(files, certs)?;
    tranche_tls::only_client_streams(&mut server, kind, limits);
    let cannot = |source: std::io::Error| NodeError::Listen {
        setting: what,
        addr,
        source,
    };
    let socket = tranche_daemon_kit::listen::udp(addr).map_err(cannot)?;
    let mut ep = quinn::Endpoint::new(
        quinn::EndpointConfig::default(),
        Some(server),
        socket,
        std::sync::Arc::new(quinn::TokioRuntime),
    )
    .map_err(cannot)?;
    let client = tranche_tls::client_config(files)?;
    ep.set_default_client_config(client);
    Ok(ep)
}

/// Creates the data dir 0700, or makes an existing one 0700: the Raft log and the
/// state images hold every job's spec, env included, and only this controller's user
/// reads them.
fn private_dir(dir: &std::path::Path) -> Result<(), NodeError> {
    use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
    let failed = |source: std::io::Error| NodeError::DataDir {
        path: dir.to_path_buf(),
        source,
    };
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
        .map_err(failed)?;
    let mode = std::fs::metadata(dir).map_err(failed)?.permissions().mode() & 0o777;
    if mode != 0o700 {
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700)).map_err(
            |source| NodeError::DataDirMode {
                path: dir.to_path_buf(),
                mode,
                source,
            },
        )?;
        info!(dir = %dir.display(), "data_dir was mode {mode:o}: made 0700");
    }
    Ok(())
}

/// A controller opened and ready to run: its storage read, its ports bound, its service
/// built. Nothing runs (but the metrics thread) until [`Controller::run`].
pub struct Controller {
    /// The service layer, for the adapters over it.
    pub service: Arc<Service>,
    /// The state this controller has applied, and its status.
    pub shared: SharedRef,
    /// The one certificate verifier (so one revocation list) of every port.
    pub certs: Arc<CertVerifier>,
    /// This controller's certificate and key.
    pub files: TlsFiles,
    /// The address the client port is bound to.
    pub client_addr: SocketAddr,
    cfg: Config,
    node: RaftNode,
    net: Arc<PeerNet>,
    tx: mpsc::Sender<crate::mailbox::NodeMsg>,
    peer_ep: quinn::Endpoint,
    client_ep: quinn::Endpoint,
}

/// Opens a controller: checks its key secret file and data dir, reads its storage,
/// binds its peer and client ports and its metrics port, and builds its Raft node and
/// service. Call it inside the tokio runtime that will run it.
pub fn open(cfg: Config) -> Result<Controller, NodeError> {
    let files = cfg.tls.clone();
    if cfg.raft.unsafe_no_fsync {
        warn!(
            "UNSAFE: raft.unsafe_no_fsync = true: the Raft log is never fsync'd. A crash of \
             this machine or its power can lose acknowledged writes and break Raft's \
             guarantees. For benchmarks only; never in production."
        );
    }
    // The key secret is read at start: a missing or unsafe file stops the controller
    // here, with the file's path and the rule it breaks.
    let key_secret = match &cfg.aws.key_secret_file {
        Some(path) => {
            Some(tranche_tls::keys::load_key_secret_file(path).map_err(NodeError::KeySecret)?)
        }
        None => None,
    };
    // One verifier, so one revocation list, for every port: reread when it changes.
    // It and this controller's certificate and key are read before the data dir is
    // made: a first start before they are installed leaves no data dir bootstrapped
    // from founding members the admin may still correct (they are read only once).
    let certs = CertVerifier::new(&files)?;
    tranche_tls::load_certs(&files.cert)?;
    tranche_tls::load_key(&files.key)?;
    private_dir(&cfg.data_dir)?;
    let storage::Opened {
        storage,
        shared,
        conf_state,
        image_index,
    } = storage::open(&cfg)?;
    let peer_ep = endpoint(
        cfg.peer_listen(),
        &files,
        &certs,
        &cfg.limits,
        if cfg.peer_listen.is_some() {
            "peer_listen"
        } else {
            "peer_addr"
        },
        ClientStreams::Uni,
    )?;
    let client_ep = endpoint(
        &cfg.client_addr,
        &files,
        &certs,
        &cfg.limits,
        "client_addr",
        ClientStreams::Bidi,
    )?;
    let client_addr = client_ep
        .local_addr()
        .map_err(|source| NodeError::LocalAddr {
            setting: "client_addr",
            source,
        })?;
    let net = PeerNet::new(cfg.id, cfg.peer_addr.clone(), peer_ep.clone());
    net.set_members(&shared.members);
    net.watch_certs(certs.clone());
    let work = Arc::new(WorkWatch::default());
    let shared = Arc::new(RwLock::new(shared));
    if let Some(addr) = &cfg.metrics_addr {
        crate::metrics::serve(addr, shared.clone()).map_err(NodeError::Metrics)?;
    }
    let (tx, rx) = mpsc::channel(65_536);
    let beats = Arc::new(Beats::default());
    let node = RaftNode::new(
        cfg.clone(),
        storage,
        shared.clone(),
        conf_state,
        image_index,
        rx,
        net.clone(),
        crate::planner::Planner::spawn(tx.clone()),
        work.clone(),
        beats.clone(),
    )?;
    let isolation = cfg
        .fault_injection
        .then(|| net.clone() as Arc<dyn Isolation>);
    let service = Arc::new(
        Service::new(tx.clone(), work, shared.clone(), beats, isolation)
            .with_key_secret(key_secret)
            .with_pinned_labels(
                cfg.agents.labels.clone(),
                cfg.agents.labels_from_config_only,
            ),
    );
    Ok(Controller {
        service,
        shared,
        certs,
        files,
        client_addr,
        cfg,
        node,
        net,
        tx,
        peer_ep,
        client_ep,
    })
}

impl Controller {
    /// Serves the peer and client ports and runs the Raft node until `shutdown` turns
    /// true (or the node fails); tells systemd when it is ready and when it stops.
    pub async fn run(self, shutdown: watch::Receiver<bool>) -> Result<(), NodeError> {
        let Controller {
            service,
            certs,
            cfg,
            node,
            net,
            tx,
            peer_ep,
            client_ep,
            ..
        } = self;
        tokio::spawn(net.serve(tx));
        let port = Arc::new(ClientPort {
            service,
            gate: Gate::new(cfg.limits.clone(), certs),
        });
        tokio::spawn(port.serve(client_ep.clone()));
        info!(id = cfg.id, peer = %cfg.peer_addr, client = %cfg.client_addr, "controller serving");
        tranche_daemon_kit::systemd::notify("READY=1");
        let r = node.run(shutdown).await;
        tranche_daemon_kit::systemd::notify("STOPPING=1");
        client_ep.close(0u32.into(), b"controller stopping");
        peer_ep.close(0u32.into(), b"controller stopping");
        r
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_listening_address_misspelt_or_taken_stops_the_start_with_its_kind() {
        let dir = tempfile::tempdir().unwrap();
        tranche_tls::init_ca(dir.path(), "test", false).unwrap();
        let files = tranche_tls::issue(
            dir.path(),
            dir.path(),
            tranche_tls::Role::Controller,
            "c1",
            &["127.0.0.1".to_string()],
            1,
        )
        .unwrap();
        let certs = CertVerifier::new(&files).unwrap();
        let limits = QuicLimits::default();
        let open =
            |addr: &str, what| endpoint(addr, &files, &certs, &limits, what, ClientStreams::Bidi);

        let e = open("c1:7000", "client_addr").unwrap_err();
        assert!(
            matches!(&e, NodeError::Address { setting: "client_addr", addr } if addr == "c1:7000"),
            "{e:?}"
        );
        assert_eq!(
            e.to_string(),
            "client_addr: `c1:7000` is not an IP address and port"
        );

        let taken = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        let addr = taken.local_addr().unwrap();
        let e = open(&addr.to_string(), "peer_addr").unwrap_err();
        assert!(
            matches!(&e, NodeError::Listen { setting: "peer_addr", addr: a, .. } if *a == addr),
            "{e:?}"
        );
        assert!(
            e.to_string()
                .starts_with(&format!("cannot listen on peer_addr {addr}: ")),
            "{e}"
        );
    }

    #[test]
    fn a_data_dir_that_cannot_be_made_is_a_data_dir_error() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("file");
        std::fs::write(&file, "").unwrap();
        let under = file.join("data");
        let e = private_dir(&under).unwrap_err();
        assert!(
            matches!(&e, NodeError::DataDir { path, .. } if *path == under),
            "{e:?}"
        );
        assert!(
            e.to_string()
                .starts_with(&format!("cannot create data_dir {}: ", under.display())),
            "{e}"
        );
    }
}
