//! Revocation: the cluster CA's certificate revocation list (`crl.pem`).

use std::fs;
use std::path::{Path, PathBuf};

use rcgen::{CertificateRevocationListParams, KeyIdMethod, RevokedCertParams, SerialNumber};
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::CertificateRevocationListDer;

use crate::certs::{asn1_time, unix_now, write_file, Ca};
use crate::{identity_of_cert, load_certs, Identity, TlsError};

/// File name of the CA's certificate revocation list inside the CA directory.
pub const CRL_FILE: &str = "crl.pem";

/// The certificate to revoke: a certificate file, or a serial number in hex (colons
/// and a leading `0x` allowed, as `openssl x509 -serial` and other tools print it).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RevokeTarget {
    /// A PEM certificate file issued by the CA (its first certificate is revoked).
    Cert(PathBuf),
    /// A serial number in hex.
    Serial(String),
}

/// What [`revoke`] did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Revocation {
    /// The revocation list written (`<ca_dir>/crl.pem`).
    pub crl: PathBuf,
    /// The revoked serial number, lower-case hex without colons or leading zeros.
    pub serial: String,
    /// Who the certificate belonged to, when it was given as a file.
    pub identity: Option<Identity>,
    /// The serial was listed already; the list was left as it was.
    pub already_revoked: bool,
    /// How many certificates the list now names.
    pub revoked: usize,
    /// The list's CRL number (one more than the previous list's).
    pub crl_number: u64,
}

/// Revokes a certificate of the CA in `ca_dir`: adds its serial number to
/// `<ca_dir>/crl.pem` (created if absent), keeps every serial listed already, and signs
/// the new list with the CA's key under the next CRL number. Revoking a listed serial
/// again changes nothing.
///
/// A certificate file must have been issued by this CA. Processes read the list named
/// by `crl` in their `[tls]` table when they start, so copy the new `crl.pem` to every
/// node and restart its daemons for the revocation to take effect there.
pub fn revoke(ca_dir: &Path, target: &RevokeTarget) -> Result<Revocation, TlsError> {
    let ca = Ca::load(ca_dir)?;
    let (serial, identity) = match target {
        RevokeTarget::Cert(path) => {
            let der = load_certs(path)?.swap_remove(0);
            let (_, cert) =
                x509_parser::parse_x509_certificate(&der).map_err(|e| TlsError::BadFile {
                    what: "certificate",
                    path: path.clone(),
                    detail: format!("cannot parse it: {e}"),
                })?;
            if cert.issuer().as_raw() != ca.subject.as_slice() {
                return Err(TlsError::field(
                    "cert",
                    path.display().to_string(),
                    format!(
                        "was not issued by the CA {} (its issuer is {})",
                        ca.cert_path.display(),
                        cert.issuer()
                    ),
                ));
            }
            (
                trim_zeros(cert.raw_serial()).to_vec(),
                identity_of_cert(&der).ok(),
            )
        }
        RevokeTarget::Serial(hex) => (parse_serial(hex)?, None),
    };

    let crl_path = ca_dir.join(CRL_FILE);
    let mut entries: Vec<(Vec<u8>, i64)> = Vec::new();
    let mut number: u64 = 0;
    if crl_path.exists() {
        for der in load_crls(&crl_path)? {
            let (_, crl) = x509_parser::parse_x509_crl(&der).map_err(|e| bad_crl(&crl_path, e))?;
            if crl.issuer().as_raw() != ca.subject.as_slice() {
                return Err(bad_crl(
                    &crl_path,
                    format!(
                        "it was not issued by the CA {} (its issuer is {})",
                        ca.cert_path.display(),
                        crl.issuer()
                    ),
                ));
            }
            let n = crl
                .crl_number()
                .map(|n| n.to_u64_digits())
                .unwrap_or_default();
            if n.len() > 1 {
                return Err(bad_crl(&crl_path, "its CRL number does not fit 64 bits"));
            }
            number = number.max(n.first().copied().unwrap_or(0));
            for r in crl.iter_revoked_certificates() {
                let s = trim_zeros(r.raw_serial()).to_vec();
                if !entries.iter().any(|(e, _)| *e == s) {
                    entries.push((s, r.revocation_date.timestamp()));
                }
            }
        }
    }
    let serial_hex = hex(&serial);
    let already_revoked = entries.iter().any(|(e, _)| *e == serial);
    if !already_revoked {
        entries.push((serial, unix_now()));
        number += 1;
        write_crl(&ca, &crl_path, &entries, number)?;
        tracing::info!(serial = %serial_hex, crl = %crl_path.display(), number, "revoked a certificate");
    }
    Ok(Revocation {
        crl: crl_path,
        serial: serial_hex,
        identity,
        already_revoked,
        revoked: entries.len(),
        crl_number: number,
    })
}

/// Signs a revocation list naming `entries` (serial, revocation time) under CRL number
/// `number` and writes it to `path`.
fn write_crl(
    ca: &Ca,
    path: &Path,
    entries: &[(Vec<u8>, i64)],
    number: u64,
) -> Result<(), TlsError> {
    let revoked_certs = entries
        .iter()
        .map(|(s, at)| {
            Ok(RevokedCertParams {
                serial_number: SerialNumber::from(s.clone()),
                revocation_time: asn1_time("revocation_time", *at)?.to_datetime(),
                reason_code: None,
                invalidity_date: None,
            })
        })
        .collect::<Result<Vec<_>, TlsError>>()?;
    // The list stays in force until it is replaced: Tranche does not expire CRLs, and
    // nextUpdate (which RFC 5280 requires) is set to the CA's own end.
    let now = unix_now();
    let params = CertificateRevocationListParams {
        this_update: asn1_time("this_update", now)?.to_datetime(),
        next_update: asn1_time("next_update", ca.not_after.max(now + 1))?.to_datetime(),
        crl_number: SerialNumber::from(number),
        issuing_distribution_point: None,
        revoked_certs,
        key_identifier_method: KeyIdMethod::Sha256,
    };
    let crl = params
        .signed_by(&ca.issuer)
        .map_err(|e| TlsError::Generate {
            what: "the certificate revocation list".into(),
            source: e,
        })?;
    let (_, parsed) = x509_parser::parse_x509_crl(crl.der())
        .map_err(|e| TlsError::Certificate(format!("cannot parse the CRL just signed: {e}")))?;
    ca.check_issuer(parsed.issuer().as_raw())?;
    let pem = crl.pem().map_err(|e| TlsError::Generate {
        what: "the PEM form of the certificate revocation list".into(),
        source: e,
    })?;
    write_file(path, pem.as_bytes(), 0o644, "write revocation list")
}

/// Reads every certificate revocation list of a PEM file (`-----BEGIN X509 CRL-----`
/// sections). Fails if the file cannot be read or holds none.
pub fn load_crls(path: &Path) -> Result<Vec<CertificateRevocationListDer<'static>>, TlsError> {
    let bytes = fs::read(path).map_err(|e| TlsError::io("read revocation list", path, e))?;
    let crls = CertificateRevocationListDer::pem_slice_iter(&bytes)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| bad_crl(path, e))?;
    if crls.is_empty() {
        return Err(bad_crl(
            path,
            "no PEM revocation list (-----BEGIN X509 CRL-----) in it",
        ));
    }
    Ok(crls)
}

fn bad_crl(path: &Path, detail: impl ToString) -> TlsError {
    TlsError::BadFile {
        what: "revocation list",
        path: path.into(),
        detail: detail.to_string(),
    }
}

/// A serial number as typed: hex digits, optionally with colons and a leading `0x`;
/// 1 to 20 bytes and not zero (RFC 5280).
fn parse_serial(text: &str) -> Result<Vec<u8>, TlsError> {
    const RULE: &str = "must be a certificate serial number in hex (colons and a leading 0x allowed), not zero, at most 20 bytes";
    let bad = || TlsError::field("serial", text, RULE);
    let t = text.trim();
    let t = t
        .strip_prefix("0x")
        .or_else(|| t.strip_prefix("0X"))
        .unwrap_or(t);
    let digits: String = t.chars().filter(|c| *c != ':').collect();
    if digits.is_empty() || !digits.chars().all(|c| c.is_ascii_hexdigit()) {
        return Err(bad());
    }
    let padded = if digits.len() % 2 == 1 {
        format!("0{digits}")
    } else {
        digits
    };
    let bytes: Vec<u8> = (0..padded.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&padded[i..i + 2], 16).map_err(|_| bad()))
        .collect::<Result<_, _>>()?;
    let bytes = trim_zeros(&bytes).to_vec();
    if bytes.is_empty() || bytes.len() > 20 {
        return Err(bad());
    }
    Ok(bytes)
}

/// The serial numbers `crls` list, as [`Revocation::serial`] prints them (lower-case
/// hex, no colons, no leading zeros). Lists that do not parse add nothing (they were
/// checked against the CA when loaded).
pub(crate) fn revoked_serials(
    crls: &[CertificateRevocationListDer<'_>],
) -> std::collections::HashSet<String> {
    crls.iter()
        .filter_map(|der| x509_parser::parse_x509_crl(der).ok())
        .flat_map(|(_, crl)| {
            crl.iter_revoked_certificates()
                .map(|r| hex(trim_zeros(r.raw_serial())))
                .collect::<Vec<_>>()
        })
        .collect()
}

/// The serial number of a certificate (DER), as [`Revocation::serial`] prints it.
pub fn serial_of_cert(der: &[u8]) -> Option<String> {
    let (_, cert) = x509_parser::parse_x509_certificate(der).ok()?;
    Some(hex(trim_zeros(cert.raw_serial())))
}

fn trim_zeros(b: &[u8]) -> &[u8] {
    let first = b.iter().position(|x| *x != 0).unwrap_or(b.len());
    &b[first..]
}

/// Lower-case hex without leading zeros (a first byte below 0x10 has one digit).
fn hex(b: &[u8]) -> String {
    let s: String = b.iter().map(|x| format!("{x:02x}")).collect();
    match s.trim_start_matches('0') {
        "" => "0".to_string(),
        t => t.to_string(),
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn serials_print_without_leading_zeros() {
        assert_eq!(super::hex(&[0x06, 0x74, 0xa5]), "674a5");
        assert_eq!(super::hex(&[0x00, 0x10]), "10");
        assert_eq!(super::hex(&[0xab]), "ab");
        assert_eq!(super::hex(&[0x00]), "0");
    }
}
