//! `tranche token issue [--ttl 8h]`: a bearer token for the HTTPS API, for the identity
//! of the certificate in the cluster config, signed with that certificate's key.
//!
//! Nothing is asked of the cluster: the token carries the certificate, and every
//! controller checks it against the cluster CA and the revocation list (see
//! `tranche_tls::token`). Revoking the certificate ends its tokens.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use crate::client_cfg::{path, ClientCfg};
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
            let r = (|| -> Result<String, String> {
                let secs = parse_duration(&ttl).map_err(|e| e.replace("--time", "--ttl"))?;
                let cfg = ClientCfg::load(&path(&config)?)?;
                tranche_tls::token::issue_token(&cfg.tls, Duration::from_secs(secs))
                    .map_err(|e| e.to_string())
            })();
            match r {
                Ok(t) => {
                    println!("{t}");
                    ExitCode::SUCCESS
                }
                Err(e) => {
                    eprintln!("tranche token issue: {e}");
                    ExitCode::from(2)
                }
            }
        }
    }
}
