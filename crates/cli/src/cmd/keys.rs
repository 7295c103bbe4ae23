//! `tranche keys issue|list|revoke`: access keys for the AWS Batch-compatible endpoint.
//! A key acts as one Tranche identity (a user, an operator or an admin); its secret is
//! derived by the controllers from the cluster's key secret file and shown once, when
//! the key is issued.

use std::path::PathBuf;
use std::process::ExitCode;

use tranche_model::{AccessKey, KeyRole};
use tranche_proto::{ClientCommand, ClientRequest, Query, Response};

use crate::client_cfg::connect;
use crate::exit::{failed, run, unexpected, CliError};
use crate::text::local_time;

#[derive(clap::Subcommand, Debug)]
pub enum KeysCmd {
    /// Issue an access key and print its id and secret (shown only this once), as
    /// `export AWS_ACCESS_KEY_ID=… AWS_SECRET_ACCESS_KEY=…` on stdout.
    ///
    /// A user issues keys for itself with role user; an operator for itself with role
    /// operator or user; an admin for anyone with any role.
    ///
    /// Example: eval "$(tranche keys issue)"
    Issue {
        /// Whom the key acts as [default: this config's certificate's name].
        #[arg(long)]
        user: Option<String>,
        /// The key's role: user, operator or admin.
        #[arg(long, default_value = "user", value_parser = parse_role)]
        role: KeyRole,
        /// Print the key as one JSON object: `access_key_id`, `secret_access_key`,
        /// `user`, `role`, `created_at` (ms since the epoch).
        #[arg(long)]
        json: bool,
        #[arg(long)]
        config: Option<PathBuf>,
    },
    /// List access keys, revoked ones included: an admin's of everyone (or of
    /// `--user`), anyone else's only its own.
    ///
    /// Example: tranche keys list --user alice
    List {
        #[arg(long)]
        user: Option<String>,
        #[arg(long)]
        json: bool,
        #[arg(long)]
        config: Option<PathBuf>,
    },
    /// Revoke an access key: it signs nothing from now on (an admin any key, others
    /// their own).
    ///
    /// Example: tranche keys revoke TK4Q7Z2M9C1B8N0P3X5W
    Revoke {
        id: String,
        #[arg(long)]
        config: Option<PathBuf>,
    },
}

fn parse_role(s: &str) -> Result<KeyRole, String> {
    KeyRole::parse(s).ok_or_else(|| format!("`{s}`: the role is user, operator or admin"))
}

pub fn keys(cmd: KeysCmd) -> ExitCode {
    match cmd {
        KeysCmd::Issue {
            user,
            role,
            json,
            config,
        } => run("keys issue", async move {
            let (client, me) = connect(&config)?;
            let user = user.unwrap_or(me);
            let req = ClientRequest::Write {
                request: None,
                command: ClientCommand::IssueAccessKey {
                    user: user.as_str().into(),
                    role,
                },
            };
            match client.request(&req).await.map_err(failed)? {
                Response::AccessKey { key, secret } => {
                    print_issued(&key, &secret, json);
                    Ok(())
                }
                other => Err(unexpected(&other)),
            }
        }),
        KeysCmd::List { user, json, config } => run("keys list", async move {
            let (client, _) = connect(&config)?;
            let query = Query::AccessKeys {
                user: user.map(|u| u.as_str().into()),
            };
            match client.read(query, false).await.map_err(failed)? {
                Response::AccessKeys(keys) => {
                    print_list(&keys, json);
                    Ok(())
                }
                other => Err(unexpected(&other)),
            }
        }),
        KeysCmd::Revoke { id, config } => run("keys revoke", async move {
            let (client, _) = connect(&config)?;
            match client
                .command(ClientCommand::RevokeAccessKey { id: id.clone() })
                .await
                .map_err(failed)?
            {
                Ok(_) => {
                    eprintln!("access key {id} revoked: it signs nothing from now on");
                    Ok(())
                }
                Err(e) => Err::<(), CliError>(e.into()),
            }
        }),
    }
}

fn key_json(k: &AccessKey) -> serde_json::Value {
    serde_json::json!({
        "access_key_id": k.id,
        "user": k.user.as_str(),
        "role": k.role.as_str(),
        "created_at": k.created_at,
        "revoked_at": k.revoked_at,
    })
}

/// For people: the id, the secret and the warning on stderr, the `export` line on
/// stdout (so `eval "$(tranche keys issue)"` sets them).
fn print_issued(key: &AccessKey, secret: &str, json: bool) {
    if json {
        let mut v = key_json(key);
        v["secret_access_key"] = secret.into();
        println!("{v}");
        return;
    }
    eprintln!(
        "access key for {} {} (issued {})",
        key.role,
        key.user,
        local_time(key.created_at)
    );
    eprintln!("  access key id:     {}", key.id);
    eprintln!("  secret access key: {secret}");
    eprintln!(
        "The secret is shown only this once: keep it now (`tranche keys revoke {}` ends the key).",
        key.id
    );
    println!(
        "export AWS_ACCESS_KEY_ID={} AWS_SECRET_ACCESS_KEY={secret}",
        key.id
    );
}

fn print_list(keys: &[AccessKey], json: bool) {
    if json {
        let rows: Vec<_> = keys.iter().map(key_json).collect();
        println!("{}", serde_json::Value::Array(rows));
        return;
    }
    println!(
        "{:<20} {:<16} {:<8} {:<19}  STATUS",
        "ID", "USER", "ROLE", "CREATED"
    );
    for k in keys {
        let status = match k.revoked_at {
            Some(t) => format!("revoked {}", local_time(t)),
            None => "active".into(),
        };
        println!(
            "{:<20} {:<16} {:<8} {:<19}  {status}",
            k.id,
            k.user.as_str(),
            k.role.as_str(),
            local_time(k.created_at)
        );
    }
}
