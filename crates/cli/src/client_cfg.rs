//! Where the CLI finds the cluster: `--config FILE` or `$TRANCHE_CONFIG`, a TOML file
//! with the controllers' client addresses and this user's certificate.
//!
//! ```toml
//! controllers = ["10.0.0.11:7100", "10.0.0.12:7100", "10.0.0.13:7100"]
//! [tls]
//! ca = "/home/alice/.tranche/ca.pem"
//! cert = "/home/alice/.tranche/user-alice.pem"
//! key = "/home/alice/.tranche/user-alice.key"
//! crl = "/home/alice/.tranche/crl.pem"    # optional: the CA's revocation list
//! ```
//!
//! An optional `http = ["https://10.0.0.11:7443", ...]` lists the controllers' HTTPS
//! API URLs, which the Python SDK reads from the same file.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use serde::Deserialize;
use tranche_client::Client;
use tranche_tls::TlsFiles;

use crate::exit::{usage, Fail};
use crate::leader_cache::LeaderCache;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClientCfg {
    pub controllers: Vec<String>,
    /// The controllers' HTTPS API URLs (`https://10.0.0.11:7443`), for the Python SDK
    /// and other HTTP clients; the CLI itself speaks QUIC.
    #[serde(default)]
    pub http: Vec<String>,
    /// `ca`, `cert`, `key` and the optional `crl`.
    pub tls: TlsFiles,
}

/// The config file to use: the flag, else `$TRANCHE_CONFIG`.
pub fn path(flag: &Option<PathBuf>) -> Result<PathBuf, String> {
    flag.clone()
        .or_else(|| std::env::var_os("TRANCHE_CONFIG").map(PathBuf::from))
        .ok_or_else(|| {
            "no cluster config: pass --config FILE or set TRANCHE_CONFIG (`tranche dev` prints the line to paste)".into()
        })
}

impl ClientCfg {
    pub fn load(path: &Path) -> Result<ClientCfg, String> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
        let cfg: ClientCfg =
            toml::from_str(&text).map_err(|e| format!("{}: {e}", path.display()))?;
        if cfg.controllers.is_empty()
            || cfg
                .controllers
                .iter()
                .any(|a| a.parse::<SocketAddr>().is_err())
        {
            return Err(format!(
                "{}: field `controllers`: must list the controllers' client addresses, e.g. \"10.0.0.11:7100\"",
                path.display()
            ));
        }
        if let Some(bad) = cfg.http.iter().find(|u| !u.starts_with("https://")) {
            return Err(format!(
                "{}: field `http`: `{bad}` must be an https:// URL, e.g. \"https://10.0.0.11:7443\"",
                path.display()
            ));
        }
        Ok(cfg)
    }

    /// A client of the cluster that tries first the controller the leader cache names
    /// (see [`crate::leader_cache`]).
    pub fn client(&self) -> Result<Client, String> {
        let addrs = self
            .controllers
            .iter()
            .filter_map(|a| a.parse().ok())
            .collect();
        let client = Client::new(addrs, &self.tls).map_err(|e| e.to_string())?;
        if let Some(i) = LeaderCache::for_cluster(client.controllers()).get() {
            client.prefer(i);
        }
        Ok(client)
    }
}

/// Asks the controller in use which controller leads, and remembers it in the leader
/// cache for the next command. Best effort: without an answer the cache is left as it
/// is.
pub async fn remember_leader(client: &Client) {
    if let Ok(Some(i)) = client.leader().await {
        LeaderCache::for_cluster(client.controllers()).put(i);
    }
}

/// The client for `--config` (or `$TRANCHE_CONFIG`).
pub fn client(config: &Option<PathBuf>) -> Result<Client, Fail> {
    load(config)?.client().map_err(usage)
}

/// The client and the name in its certificate.
pub fn connect(config: &Option<PathBuf>) -> Result<(Client, String), Fail> {
    let cfg = load(config)?;
    let certs = tranche_tls::load_certs(&cfg.tls.cert).map_err(|e| usage(e.to_string()))?;
    let first = certs.first().ok_or_else(|| {
        usage(format!(
            "{}: no certificate in the file",
            cfg.tls.cert.display()
        ))
    })?;
    let who = tranche_tls::identity_of_cert(first).map_err(|e| usage(e.to_string()))?;
    Ok((cfg.client().map_err(usage)?, who.name))
}

fn load(config: &Option<PathBuf>) -> Result<ClientCfg, Fail> {
    ClientCfg::load(&path(config).map_err(usage)?).map_err(usage)
}
