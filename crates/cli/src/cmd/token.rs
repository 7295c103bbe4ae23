//! `tranche token issue [--ttl 8h]`: a bearer token for the HTTPS API, for the identity
//! of the certificate in the cluster config, signed with that certificate's key.
//!
//! Nothing is asked of the cluster: the token carries the certificate, and every
//! controller checks it against the cluster CA and the revocation list (see
//! `tranche_tls::token`). Revoking the certificate ends its tokens.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use crate::client_cfg::{path, ClientCfg, ConfigError};
use crate::exit::{finish, CliError};
use crate::parse::parse_duration;

#[derive(clap::Subcommand, Debug)]
pub enum TokenCmd {
    /// Print a token for this config's certificate (its role and name), valid for
    /// `--ttl` (at most 7 days). Send it as `Authorization: Bearer <token>`.
    ///
    /// Example: export TRANCHE_TOKEN=$(tranche token issue --ttl 8h)
    Issue {
        /// How long it is valid: 8h, 90m, 2d, ... (at most 7d).
        #[arg(long, default_value = "8h")]
        ttl: String,
        /// The cluster config (default: $TRANCHE_CONFIG).
        #[arg(long)]
        config: Option<PathBuf>,
    },
}

pub fn token(cmd: TokenCmd) -> ExitCode {
    match cmd {
        TokenCmd::Issue { ttl, config } => {
            let r = issue(&ttl, &config).map(|t| println!("{t}"));
            finish("token issue", r)
        }
    }
}

/// A token for the config's certificate, valid for `ttl`.
fn issue(ttl: &str, config: &Option<PathBuf>) -> Result<String, CliError> {
    let secs = parse_duration(ttl).map_err(|e| e.for_option("--ttl"))?;
    let cfg = ClientCfg::load(&path(config)?)?;
    tranche_tls::token::issue_token(&cfg.tls, Duration::from_secs(secs)).map_err(|e| match e {
        // Only the validity can break a rule here.
        e @ tranche_tls::TlsError::InvalidField { .. } => CliError::Usage(e.to_string()),
        e => ConfigError::from(e).into(),
    })
}
