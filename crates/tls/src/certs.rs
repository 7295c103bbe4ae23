//! The cluster CA and the certificates it issues, and the PEM files they live in.

use std::fs;
use std::io::Write;
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, DnValue,
    ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair, KeyUsagePurpose, PublicKeyData, SanType,
};
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};
use x509_parser::time::ASN1Time;

use crate::identity::{validate_name, URI_PREFIX};
use crate::{agent_server_name, Role, TlsError, CONTROLLER_SERVER_NAME};

/// File name of the cluster CA's certificate inside a certificate directory.
pub const CA_CERT_FILE: &str = "ca.pem";
/// File name of the cluster CA's private key inside the CA directory.
pub const CA_KEY_FILE: &str = "ca.key";
/// How long a cluster CA made by [`init_ca`] is valid, in days (about ten years).
pub const CA_VALID_DAYS: u32 = 3650;
/// How far before "now" certificates start being valid, to absorb clock skew between
/// nodes (one hour).
const BACKDATE_S: i64 = 3600;

/// The PEM files one Tranche process needs for mutual TLS: the cluster CA's
/// certificate, its own certificate, its own private key and, optionally, the CA's
/// certificate revocation list.
///
/// It is also the `[tls]` table of every Tranche config file (`tranched`,
/// `tranche-agent`, the CLI's), where unknown keys are refused:
///
/// ```toml
/// [tls]
/// ca = "/etc/tranche/certs/ca.pem"
/// cert = "/etc/tranche/certs/agent-gpu01.pem"
/// key = "/etc/tranche/certs/agent-gpu01.key"
/// crl = "/etc/tranche/certs/crl.pem"   # optional
/// ```
#[derive(Clone, Debug, PartialEq, Eq, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TlsFiles {
    /// The cluster CA's certificate (`ca.pem`): peers must chain to it.
    pub ca: PathBuf,
    /// This process's certificate (`<role>-<name>.pem`).
    pub cert: PathBuf,
    /// This process's private key (`<role>-<name>.key`, mode 0600).
    pub key: PathBuf,
    /// The CA's certificate revocation list (`crl.pem`, written by
    /// [`revoke`](crate::revoke)): one PEM file holding one or more CRLs, each issued
    /// by the cluster CA. A peer whose certificate is listed is refused. Absent: no
    /// certificate is taken as revoked. Read again whenever the file changes (looked at once a second).
    #[serde(default)]
    pub crl: Option<PathBuf>,
}

impl TlsFiles {
    /// The files [`issue`] writes for `role` and `name` in `dir`: `dir/ca.pem`,
    /// `dir/<role>-<name>.pem` and `dir/<role>-<name>.key`.
    pub fn in_dir(dir: &Path, role: Role, name: &str) -> TlsFiles {
        TlsFiles {
            ca: dir.join(CA_CERT_FILE),
            cert: dir.join(format!("{role}-{name}.pem")),
            key: dir.join(format!("{role}-{name}.key")),
            crl: None,
        }
    }
}

/// Creates the cluster's CA in `dir`: writes `dir/ca.pem` (the CA certificate, to be
/// copied to every node) and `dir/ca.key` (its private key, mode 0600, to be kept on
/// the admin's machine only). Returns the path of `ca.pem`.
///
/// `cluster` names the cluster in the CA's subject (`CN=Tranche CA <cluster>`) and
/// follows the same rule as certificate names (see [`validate_name`]). The CA is valid
/// for [`CA_VALID_DAYS`] days and may sign only end-entity certificates.
///
/// Refuses to replace an existing `ca.pem` or `ca.key` unless `force` is set: a new CA
/// makes every certificate the old one issued untrusted.
pub fn init_ca(dir: &Path, cluster: &str, force: bool) -> Result<PathBuf, TlsError> {
    validate_name("cluster", cluster)?;
    let cert_path = dir.join(CA_CERT_FILE);
    let key_path = dir.join(CA_KEY_FILE);
    if !force {
        for p in [&key_path, &cert_path] {
            if p.exists() {
                return Err(TlsError::AlreadyExists { path: p.clone() });
            }
        }
    }
    fs::create_dir_all(dir).map_err(|e| TlsError::io("create certificate directory", dir, e))?;

    let key = KeyPair::generate().map_err(|e| TlsError::Generate {
        what: "the CA key".into(),
        source: e,
    })?;
    let mut params = CertificateParams::default();
    params.distinguished_name = ca_subject(cluster);
    params.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
    params.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    let now = unix_now();
    params.not_before = asn1_time("not_before", now - BACKDATE_S)?.to_datetime();
    params.not_after = asn1_time("not_after", now + days_s(CA_VALID_DAYS))?.to_datetime();
    let cert = params.self_signed(&key).map_err(|e| TlsError::Generate {
        what: "the CA certificate".into(),
        source: e,
    })?;

    write_file(
        &key_path,
        key.serialize_pem().as_bytes(),
        0o600,
        "write CA key",
    )?;
    write_file(
        &cert_path,
        cert.pem().as_bytes(),
        0o644,
        "write CA certificate",
    )?;
    tracing::info!(cluster, ca = %cert_path.display(), "created the cluster CA");
    Ok(cert_path)
}

/// Issues a certificate for `role` and `name`, signed by the CA in `ca_dir`
/// (`ca.pem` and `ca.key`), with a fresh private key.
///
/// Writes `out_dir/<role>-<name>.pem` (the certificate), `out_dir/<role>-<name>.key`
/// (its key, mode 0600) and, when `out_dir` is not `ca_dir`, a copy of `ca.pem`;
/// existing files of the same names are replaced. Returns those three paths.
///
/// The certificate carries the identity as the URI subject-alternative name
/// `tranche://<role>/<name>` (read back by [`identity_of_cert`](crate::identity_of_cert))
/// and `name` as its common name. It is a TLS client certificate (extended key usage
/// clientAuth). A controller's is also a server certificate (serverAuth) for the DNS
/// name [`CONTROLLER_SERVER_NAME`], plus every entry of `hosts` (DNS names or IP
/// addresses); `hosts` must be empty for the other roles.
///
/// `name` must pass [`validate_name`]; `valid_days` must be at least 1 and the
/// certificate must not outlive the CA.
pub fn issue(
    ca_dir: &Path,
    out_dir: &Path,
    role: Role,
    name: &str,
    hosts: &[String],
    valid_days: u32,
) -> Result<TlsFiles, TlsError> {
    validate_name("name", name)?;
    if role != Role::Controller {
        if let Some(h) = hosts.first() {
            return Err(TlsError::field(
                "host",
                h.as_str(),
                format!(
                    "host names and addresses are only for controller certificates, not {role}"
                ),
            ));
        }
    }
    let sans = leaf_sans(role, name, hosts)?;
    if valid_days == 0 {
        return Err(TlsError::field(
            "valid_days",
            "0",
            "a certificate must be valid for at least 1 day",
        ));
    }

    // The CA: its certificate, its key, and a check that they belong together.
    let ca = Ca::load(ca_dir)?;
    let now = unix_now();
    if ca.not_after <= now {
        return Err(bad_ca(
            &ca.cert_path,
            format!("it expired on {}", ca.not_after_text),
        ));
    }
    let not_after = now + days_s(valid_days);
    if not_after > ca.not_after {
        return Err(TlsError::field(
            "valid_days",
            valid_days.to_string(),
            format!(
                "the certificate would outlive the CA, which expires on {} ({} days from now)",
                ca.not_after_text,
                (ca.not_after - now) / 86_400
            ),
        ));
    }
    sign_leaf(&ca, out_dir, role, name, sans, now - BACKDATE_S, not_after)
}

/// Like [`issue`], but valid exactly from `not_before` to `not_after`, which may lie
/// wholly in the past or the future. For tests of expired and not-yet-valid
/// certificates; administrators use [`issue`].
pub fn issue_valid_between(
    ca_dir: &Path,
    out_dir: &Path,
    role: Role,
    name: &str,
    not_before: SystemTime,
    not_after: SystemTime,
) -> Result<TlsFiles, TlsError> {
    validate_name("name", name)?;
    let sans = leaf_sans(role, name, &[])?;
    let unix = |t: SystemTime| match t.duration_since(UNIX_EPOCH) {
        Ok(d) => d.as_secs() as i64,
        Err(e) => -(e.duration().as_secs() as i64),
    };
    let (from, to) = (unix(not_before), unix(not_after));
    if from >= to {
        return Err(TlsError::field(
            "not_after",
            to.to_string(),
            "must be later than not_before",
        ));
    }
    sign_leaf(&Ca::load(ca_dir)?, out_dir, role, name, sans, from, to)
}

/// The cluster CA, loaded from its directory for signing: its certificate (DER and
/// PEM), its key, and what of its certificate the signer needs.
pub(crate) struct Ca {
    pub(crate) dir: PathBuf,
    pub(crate) cert_path: PathBuf,
    pub(crate) pem: Vec<u8>,
    /// The CA's subject, DER-encoded: the issuer of everything it signs.
    pub(crate) subject: Vec<u8>,
    pub(crate) not_after: i64,
    pub(crate) not_after_text: String,
    pub(crate) issuer: Issuer<'static, KeyPair>,
}

impl Ca {
    /// Reads `ca.pem` and `ca.key` from `ca_dir` and checks that they belong together
    /// and that the certificate is a CA's.
    pub(crate) fn load(ca_dir: &Path) -> Result<Ca, TlsError> {
        let ca_cert_path = ca_dir.join(CA_CERT_FILE);
        let ca_key_path = ca_dir.join(CA_KEY_FILE);
        let ca_der = load_certs(&ca_cert_path)?.swap_remove(0);
        let ca_pem_bytes = fs::read(&ca_cert_path)
            .map_err(|e| TlsError::io("read CA certificate", &ca_cert_path, e))?;
        let (_, ca) =
            x509_parser::parse_x509_certificate(&ca_der).map_err(|e| bad_ca(&ca_cert_path, e))?;
        match ca.basic_constraints() {
            Ok(Some(bc)) if bc.value.ca => {}
            _ => {
                return Err(bad_ca(
                    &ca_cert_path,
                    "it is not a CA certificate (no basicConstraints CA:true)",
                ))
            }
        }
        let ca_key_pem = fs::read_to_string(&ca_key_path)
            .map_err(|e| TlsError::io("read CA key", &ca_key_path, e))?;
        let ca_key = KeyPair::from_pem(&ca_key_pem).map_err(|e| TlsError::BadFile {
            what: "CA private key",
            path: ca_key_path.clone(),
            detail: e.to_string(),
        })?;
        if ca_key.subject_public_key_info() != ca.public_key().raw {
            return Err(TlsError::BadFile {
                what: "CA private key",
                path: ca_key_path,
                detail: format!(
                    "it is not the key of the CA certificate {}",
                    ca_cert_path.display()
                ),
            });
        }
        let mut ca_params = CertificateParams::default();
        ca_params.distinguished_name = rebuild_name(&ca, &ca_cert_path)?;
        Ok(Ca {
            dir: ca_dir.to_path_buf(),
            subject: ca.subject().as_raw().to_vec(),
            not_after: ca.validity().not_after.timestamp(),
            not_after_text: ca.validity().not_after.to_string(),
            pem: ca_pem_bytes,
            cert_path: ca_cert_path,
            issuer: Issuer::new(ca_params, ca_key),
        })
    }

    /// rcgen writes the issuer name from the rebuilt subject: it must be the CA's, byte
    /// for byte, or no verifier will chain what it signed to the CA.
    pub(crate) fn check_issuer(&self, issuer: &[u8]) -> Result<(), TlsError> {
        if issuer == self.subject.as_slice() {
            Ok(())
        } else {
            Err(bad_ca(
                &self.cert_path,
                "its subject name cannot be reproduced exactly (only CAs made by `tranche certs init` are supported)",
            ))
        }
    }
}

/// The subject-alternative names of a certificate for `role` and `name`.
fn leaf_sans(role: Role, name: &str, hosts: &[String]) -> Result<Vec<SanType>, TlsError> {
    let mut sans = vec![SanType::URI(ia5(
        "name",
        &format!("{URI_PREFIX}{role}/{name}"),
    )?)];
    if role == Role::Agent {
        // Agents serve their jobs' output; clients verify them under this name.
        sans.push(SanType::DnsName(ia5("name", &agent_server_name(name))?));
    }
    if role == Role::Controller {
        sans.push(SanType::DnsName(ia5("host", CONTROLLER_SERVER_NAME)?));
        for h in hosts {
            let san = host_san(h)?;
            if !sans.contains(&san) {
                sans.push(san);
            }
        }
    }
    Ok(sans)
}

/// Signs a certificate for `role` and `name`, valid from `not_before` to `not_after`
/// (Unix seconds), and writes it, its key and (outside the CA directory) `ca.pem`.
fn sign_leaf(
    ca: &Ca,
    out_dir: &Path,
    role: Role,
    name: &str,
    sans: Vec<SanType>,
    not_before: i64,
    not_after: i64,
) -> Result<TlsFiles, TlsError> {
    let key = KeyPair::generate().map_err(|e| TlsError::Generate {
        what: format!("a key for {role}:{name}"),
        source: e,
    })?;
    let mut params = CertificateParams::default();
    let mut dn = DistinguishedName::new();
    dn.push(DnType::OrganizationName, "Tranche");
    dn.push(DnType::OrganizationalUnitName, role.as_str());
    dn.push(DnType::CommonName, name);
    params.distinguished_name = dn;
    params.subject_alt_names = sans;
    params.is_ca = IsCa::ExplicitNoCa;
    params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
    params.extended_key_usages = match role {
        Role::Controller | Role::Agent => vec![
            ExtendedKeyUsagePurpose::ServerAuth,
            ExtendedKeyUsagePurpose::ClientAuth,
        ],
        _ => vec![ExtendedKeyUsagePurpose::ClientAuth],
    };
    params.use_authority_key_identifier_extension = true;
    params.not_before = asn1_time("not_before", not_before)?.to_datetime();
    params.not_after = asn1_time("not_after", not_after)?.to_datetime();
    let cert = params
        .signed_by(&key, &ca.issuer)
        .map_err(|e| TlsError::Generate {
            what: format!("the certificate for {role}:{name}"),
            source: e,
        })?;
    let (_, leaf) = x509_parser::parse_x509_certificate(cert.der()).map_err(|e| {
        TlsError::Certificate(format!("cannot parse the certificate just issued: {e}"))
    })?;
    ca.check_issuer(leaf.issuer().as_raw())?;

    fs::create_dir_all(out_dir).map_err(|e| TlsError::io("create output directory", out_dir, e))?;
    let files = TlsFiles::in_dir(out_dir, role, name);
    write_file(
        &files.key,
        key.serialize_pem().as_bytes(),
        0o600,
        "write private key",
    )?;
    write_file(
        &files.cert,
        cert.pem().as_bytes(),
        0o644,
        "write certificate",
    )?;
    if !same_dir(&ca.dir, out_dir) {
        write_file(&files.ca, &ca.pem, 0o644, "write CA certificate")?;
    }
    tracing::info!(identity = %format!("{role}:{name}"), cert = %files.cert.display(), "issued a certificate");
    Ok(files)
}

/// Reads every certificate of a PEM file (`-----BEGIN CERTIFICATE-----` sections), in
/// order. Fails if the file cannot be read or holds none.
pub fn load_certs(path: &Path) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let bytes = fs::read(path).map_err(|e| TlsError::io("read certificate", path, e))?;
    let certs = CertificateDer::pem_slice_iter(&bytes)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| TlsError::BadFile {
            what: "certificate",
            path: path.into(),
            detail: e.to_string(),
        })?;
    if certs.is_empty() {
        return Err(TlsError::BadFile {
            what: "certificate",
            path: path.into(),
            detail: "no PEM certificate (-----BEGIN CERTIFICATE-----) in it".into(),
        });
    }
    Ok(certs)
}

/// Reads the first private key of a PEM file (PKCS#8, SEC1 or PKCS#1). Fails if the
/// file cannot be read or holds none; logs a warning if others may read it.
pub fn load_key(path: &Path) -> Result<PrivateKeyDer<'static>, TlsError> {
    let bytes = fs::read(path).map_err(|e| TlsError::io("read private key", path, e))?;
    #[cfg(unix)]
    if let Ok(meta) = fs::metadata(path) {
        use std::os::unix::fs::PermissionsExt;
        if meta.permissions().mode() & 0o077 != 0 {
            tracing::warn!(key = %path.display(), mode = format!("{:o}", meta.permissions().mode() & 0o777),
                "private key is readable by other users; chmod 600 it");
        }
    }
    PrivateKeyDer::from_pem_slice(&bytes).map_err(|e| TlsError::BadFile {
        what: "private key",
        path: path.into(),
        detail: match e {
            rustls_pki_types::pem::Error::NoItemsFound => {
                "no PEM private key (-----BEGIN PRIVATE KEY-----) in it".into()
            }
            e => e.to_string(),
        },
    })
}

/// The CA's subject: `O=Tranche, CN=Tranche CA <cluster>`.
fn ca_subject(cluster: &str) -> DistinguishedName {
    let mut dn = DistinguishedName::new();
    dn.push(DnType::OrganizationName, "Tranche");
    dn.push(DnType::CommonName, format!("Tranche CA {cluster}"));
    dn
}

/// Rebuilds an rcgen name from a parsed certificate's subject (UTF-8 string values, as
/// `init_ca` writes them); the caller checks the result byte for byte.
fn rebuild_name(
    cert: &x509_parser::certificate::X509Certificate<'_>,
    path: &Path,
) -> Result<DistinguishedName, TlsError> {
    let mut dn = DistinguishedName::new();
    for attr in cert.subject().iter_attributes() {
        let oid: Vec<u64> = attr
            .attr_type()
            .iter()
            .ok_or_else(|| {
                bad_ca(
                    path,
                    "its subject has an attribute type that is not a valid OID",
                )
            })?
            .collect();
        let value = attr
            .as_str()
            .map_err(|e| bad_ca(path, format!("its subject has a non-string attribute: {e}")))?;
        dn.push(
            DnType::from_oid(&oid),
            DnValue::Utf8String(value.to_string()),
        );
    }
    Ok(dn)
}

fn bad_ca(path: &Path, detail: impl ToString) -> TlsError {
    TlsError::BadFile {
        what: "CA certificate",
        path: path.into(),
        detail: detail.to_string(),
    }
}

fn ia5(field: &'static str, s: &str) -> Result<rcgen::string::Ia5String, TlsError> {
    s.try_into()
        .map_err(|e: rcgen::Error| TlsError::field(field, s, e.to_string()))
}

/// A controller host: an IP address, or a DNS name (labels of 1 to 63 letters, digits
/// and '-', not starting or ending with '-', 253 characters at most).
fn host_san(h: &str) -> Result<SanType, TlsError> {
    if let Ok(ip) = h.parse::<IpAddr>() {
        return Ok(SanType::IpAddress(ip));
    }
    let label_ok = |l: &str| {
        (1..=63).contains(&l.len())
            && l.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
            && !l.starts_with('-')
            && !l.ends_with('-')
    };
    if h.len() <= 253 && h.split('.').all(label_ok) {
        Ok(SanType::DnsName(ia5("host", &h.to_ascii_lowercase())?))
    } else {
        Err(TlsError::field(
            "host",
            h,
            "must be an IP address or a DNS name (dot-separated labels of letters, digits and '-')",
        ))
    }
}

fn same_dir(a: &Path, b: &Path) -> bool {
    match (a.canonicalize(), b.canonicalize()) {
        (Ok(a), Ok(b)) => a == b,
        _ => a == b,
    }
}

pub(crate) fn unix_now() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or(0)
}

fn days_s(days: u32) -> i64 {
    i64::from(days) * 86_400
}

/// A certificate time from a Unix timestamp (x509-parser's type, which converts to the
/// `OffsetDateTime` rcgen takes, so this crate needs no direct dependency on `time`).
pub(crate) fn asn1_time(field: &'static str, unix: i64) -> Result<ASN1Time, TlsError> {
    ASN1Time::from_timestamp(unix)
        .map_err(|e| TlsError::field(field, unix.to_string(), e.to_string()))
}

/// Writes `contents` to `path` through a temporary file in the same directory that is
/// created with `mode` (so a key is never readable by others, not even briefly), then
/// renamed over `path`.
pub(crate) fn write_file(
    path: &Path,
    contents: &[u8],
    mode: u32,
    action: &str,
) -> Result<(), TlsError> {
    let file_name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let tmp = path.with_file_name(format!(".{file_name}.tmp-{}", std::process::id()));
    let _ = fs::remove_file(&tmp);
    let result = (|| {
        let mut opts = fs::OpenOptions::new();
        opts.write(true).create_new(true);
        #[cfg(unix)]
        {
            use std::os::unix::fs::OpenOptionsExt;
            opts.mode(mode);
        }
        #[cfg(not(unix))]
        let _ = mode;
        let mut f = opts.open(&tmp)?;
        f.write_all(contents)?;
        f.sync_all()?;
        fs::rename(&tmp, path)
    })();
    result.map_err(|e| {
        let _ = fs::remove_file(&tmp);
        TlsError::io(action, path, e)
    })
}
