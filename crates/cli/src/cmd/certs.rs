//! `tranche certs`: the cluster's CA and the certificates of controllers, agents,
//! admins, operators and users: create the CA, issue, revoke.

use std::path::PathBuf;
use std::process::ExitCode;

#[derive(clap::Subcommand)]
pub enum CertsCmd {
    /// Create the cluster CA: ca.pem (copy it to every node) and ca.key (mode 0600; keep
    /// it on the admin's machine only).
    ///
    /// Refuses to replace an existing CA unless --force is given: a new CA makes every
    /// certificate the old one issued untrusted. Prints the paths it wrote.
    ///
    /// Example: tranche certs init --dir /etc/tranche/certs --cluster lab
    Init {
        /// Directory to write to [default: $TRANCHE_CERTS, else ./certs].
        #[arg(long)]
        dir: Option<PathBuf>,
        /// The cluster's name, written into the CA's subject.
        #[arg(long, default_value = "tranche")]
        cluster: String,
        /// Replace an existing CA.
        #[arg(long)]
        force: bool,
    },
    /// Issue a certificate and key for a role and name, signed by the cluster CA.
    ///
    /// Writes <out>/<role>-<name>.pem, <out>/<role>-<name>.key (mode 0600) and, when
    /// <out> is not the CA directory, a copy of ca.pem; prints the paths it wrote.
    /// Existing files of the same names are replaced.
    ///
    /// Example: tranche certs issue --role controller --name c1 --host 10.0.0.1
    Issue {
        /// controller, agent, admin, operator or user.
        #[arg(long)]
        role: tranche_tls::Role,
        /// The holder's name (the node name for an agent, the user name for a user): 1
        /// to 63 characters of a-z, 0-9, '-', '_' and '.', starting with a letter or
        /// digit.
        #[arg(long)]
        name: String,
        /// A DNS name or IP address the controller is reached at (controllers only;
        /// repeatable). Clients always verify the name controller.tranche, which every
        /// controller certificate carries.
        #[arg(long = "host")]
        hosts: Vec<String>,
        /// The CA directory, holding ca.pem and ca.key [default: $TRANCHE_CERTS, else
        /// ./certs].
        #[arg(long)]
        dir: Option<PathBuf>,
        /// Directory to write the certificate to [default: the CA directory].
        #[arg(long)]
        out: Option<PathBuf>,
        /// Days the certificate is valid.
        #[arg(long, default_value_t = 365)]
        days: u32,
    },
    /// Revoke a certificate: add it to the CA's revocation list, crl.pem in the CA
    /// directory.
    ///
    /// Keeps every certificate listed already and signs the new list with the CA key
    /// under the next CRL number; revoking a listed certificate again changes nothing.
    /// Prints the path of crl.pem. Daemons and clients read the list named by `crl` in
    /// their [tls] table when they start: copy crl.pem to every node, then restart the
    /// controllers one at a time and the agents.
    ///
    /// Example: tranche certs revoke --dir /etc/tranche/certs --cert user-mallory.pem
    #[command(group(clap::ArgGroup::new("what").required(true).args(["cert", "serial"])))]
    Revoke {
        /// The CA directory, holding ca.pem and ca.key [default: $TRANCHE_CERTS, else
        /// ./certs].
        #[arg(long, visible_alias = "ca-dir")]
        dir: Option<PathBuf>,
        /// The certificate to revoke (a PEM file issued by this CA).
        #[arg(long)]
        cert: Option<PathBuf>,
        /// Or its serial number, in hex (colons allowed), as `openssl x509 -noout
        /// -serial` prints it.
        #[arg(long)]
        serial: Option<String>,
    },
}

/// The certificate directory when --dir is not given: `$TRANCHE_CERTS`, else `./certs`.
fn default_certs_dir() -> PathBuf {
    std::env::var_os("TRANCHE_CERTS")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("certs"))
}

pub fn certs(cmd: CertsCmd) -> ExitCode {
    let written: Result<Vec<PathBuf>, tranche_tls::TlsError> = match cmd {
        CertsCmd::Init {
            dir,
            cluster,
            force,
        } => {
            let dir = dir.unwrap_or_else(default_certs_dir);
            tranche_tls::init_ca(&dir, &cluster, force)
                .map(|ca| vec![ca, dir.join(tranche_tls::CA_KEY_FILE)])
        }
        CertsCmd::Issue {
            role,
            name,
            hosts,
            dir,
            out,
            days,
        } => {
            let dir = dir.unwrap_or_else(default_certs_dir);
            let out = out.unwrap_or_else(|| dir.clone());
            tranche_tls::issue(&dir, &out, role, &name, &hosts, days).map(|files| {
                let copied_ca = match (dir.canonicalize(), out.canonicalize()) {
                    (Ok(a), Ok(b)) => a != b,
                    _ => dir != out,
                };
                let mut paths = vec![files.cert, files.key];
                if copied_ca {
                    paths.push(files.ca);
                }
                paths
            })
        }
        CertsCmd::Revoke { dir, cert, serial } => {
            let dir = dir.unwrap_or_else(default_certs_dir);
            let target = match (cert, serial) {
                (Some(c), _) => tranche_tls::RevokeTarget::Cert(c),
                (None, Some(s)) => tranche_tls::RevokeTarget::Serial(s),
                (None, None) => unreachable!("clap requires --cert or --serial"),
            };
            tranche_tls::revoke(&dir, &target).map(|r| {
                let who = r.identity.map(|i| format!(" ({i})")).unwrap_or_default();
                if r.already_revoked {
                    eprintln!(
                        "serial {}{who} was revoked already; {} unchanged",
                        r.serial,
                        r.crl.display()
                    );
                } else {
                    eprintln!(
                        "revoked serial {}{who}; the list names {} certificate(s), CRL number {}",
                        r.serial, r.revoked, r.crl_number
                    );
                }
                vec![r.crl]
            })
        }
    };
    match written {
        Ok(paths) => {
            for p in paths {
                println!("{}", p.display());
            }
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::from(2)
        }
    }
}
