//! Wires a controller together: storage, the Raft node, the peer transport and the
//! client API, and runs them until shutdown.

use std::net::SocketAddr;
use std::sync::{Arc, RwLock};

use tokio::sync::{mpsc, watch};
use tracing::{info, warn};
use tranche_tls::TlsFiles;

use crate::config::Config;
use crate::liveness::Beats;
use crate::mailbox::{NodeError, WorkWatch};
use crate::node::{storage, RaftNode};
use crate::peer::PeerNet;
use crate::quic::ClientPort;
use crate::service::{Isolation, Service};
use tranche_tls::ClientStreams;

/// A QUIC endpoint listening on `addr`, whose clients open streams of `kind`.
fn endpoint(
    addr: &str,
    files: &TlsFiles,
    what: &str,
    kind: ClientStreams,
) -> Result<quinn::Endpoint, NodeError> {
    let addr: SocketAddr = addr
        .parse()
        .map_err(|_| NodeError::Other(format!("{what}: `{addr}` is not an IP address and port")))?;
    let mut server =
        tranche_tls::server_config(files).map_err(|e| NodeError::Other(e.to_string()))?;
    tranche_tls::only_client_streams(&mut server, kind);
    let mut ep = quinn::Endpoint::server(server, addr)
        .map_err(|e| NodeError::Other(format!("cannot listen on {what} {addr}: {e}")))?;
    let client = tranche_tls::client_config(files).map_err(|e| NodeError::Other(e.to_string()))?;
    ep.set_default_client_config(client);
    Ok(ep)
}

/// Runs a controller until `shutdown` turns true (or the node fails).
pub async fn run(cfg: Config, shutdown: watch::Receiver<bool>) -> Result<(), NodeError> {
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
        Some(path) => Some(crate::aws::keys::load_key_secret_file(path).map_err(NodeError::Other)?),
        None => None,
    };
    let storage::Opened {
        storage,
        shared,
        conf_state,
        image_index,
    } = storage::open(&cfg)?;
    let peer_ep = endpoint(
        cfg.peer_listen(),
        &files,
        if cfg.peer_listen.is_some() {
            "peer_listen"
        } else {
            "peer_addr"
        },
        ClientStreams::Uni,
    )?;
    let client_ep = endpoint(&cfg.client_addr, &files, "client_addr", ClientStreams::Bidi)?;
    let http = match &cfg.http_addr {
        Some(addr) => {
            let listener = crate::http::bind(addr).map_err(NodeError::Other)?;
            let certs = tranche_tls::CertVerifier::new(&files)
                .map_err(|e| NodeError::Other(e.to_string()))?;
            let tls = tranche_tls::https_server_config(&files, certs.clone())
                .map_err(|e| NodeError::Other(e.to_string()))?;
            Some((listener, tls, certs))
        }
        None => None,
    };
    // The AWS Batch-compatible endpoint serves where the cluster's key secret is set.
    let aws = key_secret.as_ref().map(|k| {
        Arc::new(crate::aws::Endpoint::new(
            cfg.aws.clone(),
            k.as_bytes().to_vec(),
        ))
    });
    let net = PeerNet::new(cfg.id, cfg.peer_addr.clone(), peer_ep.clone());
    net.set_members(&shared.members);
    let work = Arc::new(WorkWatch::default());
    let shared = Arc::new(RwLock::new(shared));
    if let Some(addr) = &cfg.metrics_addr {
        crate::metrics::serve(addr, shared.clone()).map_err(NodeError::Other)?;
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
    tokio::spawn(net.clone().serve(tx.clone()));
    let isolation = cfg
        .fault_injection
        .then(|| net.clone() as Arc<dyn Isolation>);
    let shared_for_http = shared.clone();
    let service = Arc::new(
        Service::new(tx, work, shared, beats, isolation)
            .with_key_secret(key_secret)
            .with_pinned_labels(cfg.agents.labels.clone()),
    );
    if let Some((listener, tls, certs)) = http {
        let client_addr = client_ep
            .local_addr()
            .map_err(|e| NodeError::Other(format!("client_addr: {e}")))?;
        let api = crate::http::Api::new(
            service.clone(),
            shared_for_http,
            certs,
            files.clone(),
            client_addr,
            aws.clone(),
        );
        tokio::spawn(crate::http::serve(listener, tls, api, shutdown.clone()));
    }
    let port = Arc::new(ClientPort { service });
    tokio::spawn(port.serve(client_ep.clone()));
    info!(id = cfg.id, peer = %cfg.peer_addr, client = %cfg.client_addr, "controller serving");
    tranche_proto::service::notify("READY=1");
    let r = node.run(shutdown).await;
    tranche_proto::service::notify("STOPPING=1");
    client_ep.close(0u32.into(), b"controller stopping");
    peer_ep.close(0u32.into(), b"controller stopping");
    r
}
