//! Roles and identities: who a certificate (and so a connection's peer) is.

use std::fmt;
use std::str::FromStr;

use rustls_pki_types::CertificateDer;
use x509_parser::extensions::GeneralName;

use crate::TlsError;

/// The scheme of the URI subject-alternative name that carries a Tranche identity:
/// `tranche://<role>/<name>`.
pub(crate) const URI_PREFIX: &str = "tranche://";

/// What a certificate's holder is allowed to be in a Tranche cluster.
///
/// Written in lower case everywhere (certificates, CLI, logs): `controller`, `agent`,
/// `admin`, `operator`, `user`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Role {
    /// A `tranched` controller; its certificate also serves QUIC connections under the
    /// name [`CONTROLLER_SERVER_NAME`](crate::CONTROLLER_SERVER_NAME).
    Controller,
    /// A `tranche-agent` on a GPU node; the identity's name is the node name.
    Agent,
    /// A cluster administrator (everything, including quota shares and certificates).
    Admin,
    /// An operator (nodes: drain, resume; jobs of every user).
    Operator,
    /// A user who submits and manages their own jobs; the name is the user name.
    User,
}

impl Role {
    /// Every role, in the order written in help texts.
    pub const ALL: [Role; 5] = [
        Role::Controller,
        Role::Agent,
        Role::Admin,
        Role::Operator,
        Role::User,
    ];

    /// The role's lower-case name, as written in certificates and on the command line.
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Controller => "controller",
            Role::Agent => "agent",
            Role::Admin => "admin",
            Role::Operator => "operator",
            Role::User => "user",
        }
    }
}

impl fmt::Display for Role {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Role {
    type Err = TlsError;

    /// Parses a lower-case role name; the error lists the allowed values.
    fn from_str(s: &str) -> Result<Role, TlsError> {
        Role::ALL
            .into_iter()
            .find(|r| r.as_str() == s)
            .ok_or_else(|| {
                TlsError::field(
                    "role",
                    s,
                    "expected one of controller, agent, admin, operator, user",
                )
            })
    }
}

/// Who a certificate belongs to: its role and its name (node name for agents, user
/// name for users, controller name for controllers).
///
/// Displayed as `role:name`, e.g. `user:alice` or `agent:gpu-017`.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Identity {
    /// The holder's role.
    pub role: Role,
    /// The holder's name (validated by [`validate_name`]).
    pub name: String,
}

impl fmt::Display for Identity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.role, self.name)
    }
}

/// Checks a certificate holder's name: 1 to 63 characters of `a-z`, `0-9`, `-`, `_`
/// and `.`, starting with a letter or digit.
///
/// `field` names the argument in the error (e.g. "name" or "cluster").
pub fn validate_name(field: &'static str, name: &str) -> Result<(), TlsError> {
    const RULE: &str =
        "must be 1 to 63 characters of a-z, 0-9, '-', '_' and '.', starting with a letter or digit";
    let ok_len = (1..=63).contains(&name.len());
    let ok_chars = name
        .bytes()
        .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || matches!(b, b'-' | b'_' | b'.'));
    let ok_start = name
        .bytes()
        .next()
        .is_some_and(|b| b.is_ascii_lowercase() || b.is_ascii_digit());
    if ok_len && ok_chars && ok_start {
        Ok(())
    } else {
        Err(TlsError::field(field, name, RULE))
    }
}

/// Reads the Tranche identity out of a DER-encoded certificate: the one URI
/// subject-alternative name of the form `tranche://<role>/<name>`.
///
/// Fails if the certificate cannot be parsed, has no such name, has more than one, or
/// its role or name is invalid.
pub fn identity_of_cert(der: &[u8]) -> Result<Identity, TlsError> {
    let (_, cert) = x509_parser::parse_x509_certificate(der)
        .map_err(|e| TlsError::Certificate(format!("cannot parse certificate: {e}")))?;
    let sans = cert.subject_alternative_name().map_err(|e| {
        TlsError::Certificate(format!(
            "certificate has an invalid subject-alternative-name extension: {e}"
        ))
    })?;
    let uris: Vec<&str> = sans
        .iter()
        .flat_map(|ext| ext.value.general_names.iter())
        .filter_map(|gn| match gn {
            GeneralName::URI(u) if u.starts_with(URI_PREFIX) => Some(*u),
            _ => None,
        })
        .collect();
    let uri = match uris.as_slice() {
        [] => {
            return Err(TlsError::Certificate(
                "certificate has no tranche:// role SAN".into(),
            ))
        }
        [one] => *one,
        many => {
            return Err(TlsError::Certificate(format!(
                "certificate has {} tranche:// role SANs ({}); exactly one is allowed",
                many.len(),
                many.join(", ")
            )))
        }
    };
    let rest = &uri[URI_PREFIX.len()..];
    let Some((role, name)) = rest.split_once('/') else {
        return Err(TlsError::Certificate(format!(
            "certificate's role SAN {uri:?} is not of the form tranche://<role>/<name>"
        )));
    };
    let bad = |e: TlsError| TlsError::Certificate(format!("certificate's role SAN {uri:?}: {e}"));
    let role: Role = role.parse().map_err(bad)?;
    validate_name("name", name).map_err(bad)?;
    Ok(Identity {
        role,
        name: name.to_string(),
    })
}

/// The identity of a QUIC connection's peer, from the certificate it presented in the
/// mutual-TLS handshake.
///
/// With [`server_config`](crate::server_config) and
/// [`client_config`](crate::client_config) both ends always present a certificate
/// chained to the cluster CA, so this fails only on a connection set up otherwise.
pub fn peer_identity(conn: &quinn::Connection) -> Result<Identity, TlsError> {
    let any = conn.peer_identity().ok_or(TlsError::NoPeerCertificate)?;
    let certs = any
        .downcast::<Vec<CertificateDer<'static>>>()
        .map_err(|_| TlsError::NoPeerCertificate)?;
    let leaf = certs.first().ok_or(TlsError::NoPeerCertificate)?;
    identity_of_cert(leaf)
}
