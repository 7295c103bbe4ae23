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

use crate::exit::CliError;
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

/// Why there is no usable cluster config.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// Neither `--config` nor `$TRANCHE_CONFIG`.
    #[error("no cluster config: pass --config FILE or set TRANCHE_CONFIG (`tranche dev` prints the line to paste)")]
    Missing,
    /// The file named cannot be read.
    #[error("cannot read {}: {source}", path.display())]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    /// Not TOML, or not the fields a config has.
    #[error("{}: {source}", path.display())]
    Syntax {
        path: PathBuf,
        source: toml::de::Error,
    },
    /// No controllers, or one that is not an address and port.
    #[error("{}: field `controllers`: must list the controllers' client addresses, e.g. \"10.0.0.11:7100\"", path.display())]
    Controllers { path: PathBuf },
    /// An HTTP API URL that is not https://.
    #[error("{}: field `http`: `{url}` must be an https:// URL, e.g. \"https://10.0.0.11:7443\"", path.display())]
    Http { path: PathBuf, url: String },
    /// The certificate file holds none.
    #[error("{}: no certificate in the file", path.display())]
    NoCertificate { path: PathBuf },
    /// The certificate, its key, the CA or the revocation list.
    #[error(transparent)]
    Tls(#[from] tranche_tls::TlsError),
    /// A client cannot be made of the files.
    #[error(transparent)]
    Client(#[from] tranche_client::ClientError),
}

/// The config file to use: the flag, else `$TRANCHE_CONFIG`.
pub fn path(flag: &Option<PathBuf>) -> Result<PathBuf, ConfigError> {
    flag.clone()
        .or_else(|| std::env::var_os("TRANCHE_CONFIG").map(PathBuf::from))
        .ok_or(ConfigError::Missing)
}

impl ClientCfg {
    pub fn load(path: &Path) -> Result<ClientCfg, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: path.into(),
            source,
        })?;
        let cfg: ClientCfg = toml::from_str(&text).map_err(|source| ConfigError::Syntax {
            path: path.into(),
            source,
        })?;
        if cfg.controllers.is_empty()
            || cfg
                .controllers
                .iter()
                .any(|a| a.parse::<SocketAddr>().is_err())
        {
            return Err(ConfigError::Controllers { path: path.into() });
        }
        if let Some(bad) = cfg.http.iter().find(|u| !u.starts_with("https://")) {
            return Err(ConfigError::Http {
                path: path.into(),
                url: bad.clone(),
            });
        }
        Ok(cfg)
    }

    /// A client of the cluster that tries first the controller the leader cache names
    /// (see [`crate::leader_cache`]).
    pub fn client(&self) -> Result<Client, ConfigError> {
        let addrs = self
            .controllers
            .iter()
            .filter_map(|a| a.parse().ok())
            .collect();
        let client = Client::new(addrs, &self.tls)?;
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
pub fn client(config: &Option<PathBuf>) -> Result<Client, CliError> {
    Ok(load(config)?.client()?)
}

/// The client and the name in its certificate.
pub fn connect(config: &Option<PathBuf>) -> Result<(Client, String), CliError> {
    let cfg = load(config)?;
    let certs = tranche_tls::load_certs(&cfg.tls.cert).map_err(ConfigError::from)?;
    let first = certs.first().ok_or_else(|| ConfigError::NoCertificate {
        path: cfg.tls.cert.clone(),
    })?;
    let who = tranche_tls::identity_of_cert(first).map_err(ConfigError::from)?;
    Ok((cfg.client()?, who.name))
}

fn load(config: &Option<PathBuf>) -> Result<ClientCfg, ConfigError> {
    ClientCfg::load(&path(config)?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_config_that_cannot_be_used_is_a_usage_failure() {
        let dir = tempfile::tempdir().unwrap();
        let missing = dir.path().join("none.toml");
        let e = ClientCfg::load(&missing).unwrap_err();
        assert!(matches!(&e, ConfigError::Read { path, .. } if *path == missing));
        assert!(e.to_string().starts_with("cannot read "), "{e}");
        assert_eq!(CliError::from(e).code(), 2);

        let bad = dir.path().join("bad.toml");
        std::fs::write(
            &bad,
            "controllers = [\"c1\"]\n[tls]\nca = \"a\"\ncert = \"b\"\nkey = \"c\"\n",
        )
        .unwrap();
        let e = ClientCfg::load(&bad).unwrap_err();
        assert!(matches!(e, ConfigError::Controllers { .. }));
        assert_eq!(
            e.to_string(),
            format!(
                "{}: field `controllers`: must list the controllers' client addresses, e.g. \"10.0.0.11:7100\"",
                bad.display()
            )
        );
    }
}
