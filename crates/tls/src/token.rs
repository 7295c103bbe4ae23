//! Bearer tokens for the HTTPS API: a certificate's holder lends its identity, for a
//! while, to code that holds no key (a notebook, a pipeline).
//!
//! A token is made where the certificate's private key is, by `tranche token issue`,
//! and is signed with that key. It carries the certificate itself and the times it was
//! issued and expires:
//!
//! ```text
//! tranche1.<certificate DER, base64url>.<claims JSON, base64url>.<ECDSA P-256 signature, base64url>
//! ```
//!
//! A controller accepts it when the certificate is one the cluster CA issued (chained to
//! the CA with the clientAuth usage, valid now, not in the revocation list), the
//! signature verifies under the certificate's key, and the token has not expired. The
//! holder is then the certificate's identity: the same role and name, so the same
//! authorization, as the certificate over mutual TLS. Only user, operator and admin
//! certificates issue tokens; agents and controllers always use their certificates.
//!
//! Why this shape: the cluster's trust stays where it already is, in the CA. No
//! controller keeps a signing secret for tokens, so nothing in a data dir (or in the
//! replicated state) lets its reader mint one; and there is no token table to replicate
//! or to lose. Revoking the certificate (`tranche certs revoke`) ends every token it
//! issued, as soon as the controllers see the new `crl.pem`. A token cannot outlive its
//! certificate, and none is accepted for longer than [`MAX_TOKEN_TTL`] after it was
//! issued, whatever its claims say. A single token cannot be withdrawn on its own:
//! keep them short (the CLI's default is 8 hours) and revoke the certificate if one
//! leaks.

use std::time::Duration;

use base64::engine::general_purpose::URL_SAFE_NO_PAD as B64;
use base64::Engine;
use ring::rand::{SecureRandom, SystemRandom};
use ring::signature::{self, EcdsaKeyPair, KeyPair as _};
use rustls_pki_types::{CertificateDer, PrivateKeyDer, UnixTime};
use serde::{Deserialize, Serialize};

use crate::https::CertVerifier;
use crate::{identity_of_cert, load_certs, load_key, Identity, Role, TlsError, TlsFiles};

/// The first field of every token of this format.
pub const TOKEN_PREFIX: &str = "tranche1";

/// The longest a token may be valid: 7 days. Longer-lived access is a certificate.
pub const MAX_TOKEN_TTL: Duration = Duration::from_secs(7 * 24 * 3600);

/// How far in the future a token's issue time may be (clock skew between machines).
const SKEW_S: u64 = 300;

/// The longest token accepted, in bytes (a certificate is well under 2 KiB).
pub const MAX_TOKEN_LEN: usize = 8 * 1024;

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Claims {
    /// Seconds since the epoch.
    iat: u64,
    exp: u64,
    /// Random, so that two tokens issued in the same second differ.
    nonce: String,
}

/// A token that was accepted: who it speaks for and until when.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TokenHolder {
    /// The issuing certificate's identity.
    pub identity: Identity,
    /// When the token expires, in seconds since the epoch.
    pub expires: u64,
}

/// Why a token was refused. Each message says what is wrong, never anything secret.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TokenError {
    /// Not of the form `tranche1.<cert>.<claims>.<signature>`.
    #[error("the bearer token is malformed: {0}")]
    Malformed(String),
    /// Its expiry time has passed.
    #[error("the bearer token expired at {0} (seconds since the epoch); issue a new one with `tranche token issue`")]
    Expired(u64),
    /// It claims a validity longer than [`MAX_TOKEN_TTL`] or an issue time in the future.
    #[error("the bearer token is not acceptable: {0}")]
    Claims(String),
    /// The certificate in it is not one the cluster accepts now.
    #[error("the bearer token's certificate is refused: {0}")]
    Certificate(String),
    /// The signature does not verify under the certificate's key.
    #[error("the bearer token's signature does not verify")]
    Signature,
}

fn now_s() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

/// Issues a token for the identity of `files.cert`, valid for `ttl` from now, signed
/// with `files.key`.
pub fn issue_token(files: &TlsFiles, ttl: Duration) -> Result<String, TlsError> {
    issue_token_at(files, ttl, now_s())
}

/// [`issue_token`] as of `now` (seconds since the epoch).
pub fn issue_token_at(files: &TlsFiles, ttl: Duration, now: u64) -> Result<String, TlsError> {
    if ttl.is_zero() || ttl > MAX_TOKEN_TTL {
        return Err(TlsError::field(
            "ttl",
            format!("{}s", ttl.as_secs()),
            "must be more than 0 and at most 7 days (168h)",
        ));
    }
    let cert = load_certs(&files.cert)?.swap_remove(0);
    let who = identity_of_cert(&cert)?;
    if !matches!(who.role, Role::User | Role::Operator | Role::Admin) {
        return Err(TlsError::Certificate(format!(
            "{who}: only user, operator and admin certificates issue tokens"
        )));
    }
    let key = load_key(&files.key)?;
    let bad_key = |detail: String| TlsError::BadFile {
        what: "private key",
        path: files.key.clone(),
        detail,
    };
    let PrivateKeyDer::Pkcs8(pkcs8) = key else {
        return Err(bad_key(
            "tokens are signed with PKCS#8 keys, as `tranche certs issue` writes them".into(),
        ));
    };
    let rng = SystemRandom::new();
    let pair = EcdsaKeyPair::from_pkcs8(
        &signature::ECDSA_P256_SHA256_ASN1_SIGNING,
        pkcs8.secret_pkcs8_der(),
        &rng,
    )
    .map_err(|e| bad_key(format!("not an ECDSA P-256 key: {e}")))?;
    if public_key(&cert).as_deref() != Some(pair.public_key().as_ref()) {
        return Err(bad_key(format!(
            "it does not belong to the certificate {}",
            files.cert.display()
        )));
    }
    let mut nonce = [0u8; 12];
    rng.fill(&mut nonce)
        .map_err(|_| bad_key("no randomness for the token's nonce".into()))?;
    let claims = Claims {
        iat: now,
        exp: now + ttl.as_secs(),
        nonce: nonce.iter().map(|b| format!("{b:02x}")).collect(),
    };
    let claims = serde_json::to_vec(&claims).expect("claims encode");
    let signed = format!(
        "{TOKEN_PREFIX}.{}.{}",
        B64.encode(&cert),
        B64.encode(claims)
    );
    let sig = pair
        .sign(&rng, signed.as_bytes())
        .map_err(|e| bad_key(format!("cannot sign: {e}")))?;
    Ok(format!("{signed}.{}", B64.encode(sig.as_ref())))
}

/// The certificate's subject public key (the uncompressed EC point), if it is P-256.
fn public_key(der: &[u8]) -> Option<Vec<u8>> {
    let (_, cert) = x509_parser::parse_x509_certificate(der).ok()?;
    let spki = cert.public_key();
    // id-ecPublicKey with the prime256v1 curve.
    let ec = spki.algorithm.algorithm.to_id_string() == "1.2.840.10045.2.1";
    let p256 = spki
        .algorithm
        .parameters
        .as_ref()
        .and_then(|p| p.as_oid().ok())
        .is_some_and(|o| o.to_id_string() == "1.2.840.10045.3.1.7");
    (ec && p256).then(|| spki.subject_public_key.data.to_vec())
}

/// Checks a bearer token against the cluster CA and revocation list of `verifier`,
/// as of `now` (seconds since the epoch).
pub fn verify_token(
    verifier: &CertVerifier,
    token: &str,
    now: u64,
) -> Result<TokenHolder, TokenError> {
    let malformed = |m: &str| TokenError::Malformed(m.to_string());
    if token.len() > MAX_TOKEN_LEN {
        return Err(malformed("longer than 8 KiB"));
    }
    let parts: Vec<&str> = token.split('.').collect();
    let [prefix, cert_b64, claims_b64, sig_b64] = parts.as_slice() else {
        return Err(malformed(
            "expected four dot-separated fields (tranche1.<certificate>.<claims>.<signature>)",
        ));
    };
    if *prefix != TOKEN_PREFIX {
        return Err(malformed("it does not start with `tranche1.`"));
    }
    let cert = B64
        .decode(cert_b64)
        .map_err(|_| malformed("the certificate field is not base64url"))?;
    let claims = B64
        .decode(claims_b64)
        .map_err(|_| malformed("the claims field is not base64url"))?;
    let sig = B64
        .decode(sig_b64)
        .map_err(|_| malformed("the signature field is not base64url"))?;
    let claims: Claims = serde_json::from_slice(&claims)
        .map_err(|e| TokenError::Malformed(format!("the claims do not read: {e}")))?;
    let cert_der = CertificateDer::from(cert.clone());
    verifier
        .check(
            &cert_der,
            UnixTime::since_unix_epoch(Duration::from_secs(now)),
        )
        .map_err(|e| TokenError::Certificate(cert_error_text(&e)))?;
    let key = public_key(&cert)
        .ok_or_else(|| TokenError::Certificate("its key is not ECDSA P-256".into()))?;
    let signed_len = token.len() - sig_b64.len() - 1;
    signature::UnparsedPublicKey::new(&signature::ECDSA_P256_SHA256_ASN1, key)
        .verify(&token.as_bytes()[..signed_len], &sig)
        .map_err(|_| TokenError::Signature)?;
    if claims.exp <= now {
        return Err(TokenError::Expired(claims.exp));
    }
    if claims.iat > now + SKEW_S {
        return Err(TokenError::Claims("it was issued in the future".into()));
    }
    if claims.exp.saturating_sub(claims.iat) > MAX_TOKEN_TTL.as_secs() {
        return Err(TokenError::Claims(
            "it claims a validity longer than 7 days".into(),
        ));
    }
    let identity = identity_of_cert(&cert).map_err(|e| TokenError::Certificate(e.to_string()))?;
    if !matches!(identity.role, Role::User | Role::Operator | Role::Admin) {
        return Err(TokenError::Certificate(format!(
            "{identity}: only user, operator and admin certificates issue tokens"
        )));
    }
    Ok(TokenHolder {
        identity,
        expires: claims.exp,
    })
}

/// rustls's certificate errors as a person reads them.
pub fn cert_error_text(e: &rustls::Error) -> String {
    use rustls::CertificateError as C;
    match e {
        rustls::Error::InvalidCertificate(c) => match c {
            C::Expired | C::ExpiredContext { .. } => "the certificate has expired".into(),
            C::NotValidYet | C::NotValidYetContext { .. } => {
                "the certificate is not valid yet".into()
            }
            C::Revoked => "the certificate is revoked".into(),
            C::UnknownIssuer => "the certificate was not issued by this cluster's CA".into(),
            C::BadSignature => "the certificate's signature is bad".into(),
            C::InvalidPurpose | C::InvalidPurposeContext { .. } => {
                "the certificate is not for client authentication".into()
            }
            C::UnknownRevocationStatus => "the certificate's revocation status is unknown".into(),
            _ => "the certificate is not accepted by this cluster's CA".into(),
        },
        other => other.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{init_ca, issue};

    fn ca() -> (tempfile::TempDir, TlsFiles) {
        let dir = tempfile::tempdir().unwrap();
        init_ca(dir.path(), "t", false).unwrap();
        let ctl = issue(dir.path(), dir.path(), Role::Controller, "c1", &[], 1).unwrap();
        (dir, ctl)
    }

    #[test]
    fn a_token_speaks_for_its_certificate_until_it_expires() {
        let (dir, ctl) = ca();
        let v = CertVerifier::new(&ctl).unwrap();
        let alice = issue(dir.path(), dir.path(), Role::User, "alice", &[], 1).unwrap();
        let now = now_s();
        let t = issue_token_at(&alice, Duration::from_secs(60), now).unwrap();
        assert!(t.starts_with("tranche1."));
        let h = verify_token(&v, &t, now + 1).unwrap();
        assert_eq!(h.identity.to_string(), "user:alice");
        assert_eq!(h.expires, now + 60);
        assert_eq!(
            verify_token(&v, &t, now + 60),
            Err(TokenError::Expired(now + 60))
        );
        // Two tokens of one second differ.
        assert_ne!(
            t,
            issue_token_at(&alice, Duration::from_secs(60), now).unwrap()
        );
    }

    #[test]
    fn forged_foreign_and_malformed_tokens_are_refused() {
        let (dir, ctl) = ca();
        let v = CertVerifier::new(&ctl).unwrap();
        let alice = issue(dir.path(), dir.path(), Role::User, "alice", &[], 1).unwrap();
        let bob = issue(dir.path(), dir.path(), Role::User, "bob", &[], 1).unwrap();
        let now = now_s();
        let t = issue_token_at(&alice, Duration::from_secs(60), now).unwrap();
        // Bob's certificate with Alice's signature: the signature does not verify.
        let parts: Vec<&str> = t.split('.').collect();
        let b = issue_token_at(&bob, Duration::from_secs(60), now).unwrap();
        let bparts: Vec<&str> = b.split('.').collect();
        let swapped = format!("{}.{}.{}.{}", parts[0], bparts[1], parts[2], parts[3]);
        assert_eq!(verify_token(&v, &swapped, now), Err(TokenError::Signature));
        // Longer claims than the signature covers.
        let claims = B64.encode(format!(
            "{{\"iat\":{now},\"exp\":{},\"nonce\":\"00\"}}",
            now + 86_400
        ));
        let stretched = format!("{}.{}.{claims}.{}", parts[0], parts[1], parts[3]);
        assert_eq!(
            verify_token(&v, &stretched, now),
            Err(TokenError::Signature)
        );
        // Another CA's certificate.
        let other = tempfile::tempdir().unwrap();
        init_ca(other.path(), "o", false).unwrap();
        let eve = issue(other.path(), other.path(), Role::Admin, "eve", &[], 1).unwrap();
        let f = issue_token_at(&eve, Duration::from_secs(60), now).unwrap();
        match verify_token(&v, &f, now) {
            Err(TokenError::Certificate(m)) => assert!(m.contains("CA"), "{m}"),
            other => panic!("{other:?}"),
        }
        for bad in [
            "",
            "tranche1",
            "tranche2.a.b.c",
            "tranche1.!!.b.c",
            "a.b.c.d.e",
        ] {
            assert!(
                matches!(verify_token(&v, bad, now), Err(TokenError::Malformed(_))),
                "{bad}"
            );
        }
    }

    #[test]
    fn only_people_issue_tokens_and_for_at_most_a_week() {
        let (dir, ctl) = ca();
        let alice = issue(dir.path(), dir.path(), Role::User, "alice", &[], 1).unwrap();
        let n1 = issue(dir.path(), dir.path(), Role::Agent, "n1", &[], 1).unwrap();
        assert!(issue_token(&n1, Duration::from_secs(60)).is_err());
        assert!(issue_token(&ctl, Duration::from_secs(60)).is_err());
        assert!(issue_token(&alice, MAX_TOKEN_TTL + Duration::from_secs(1)).is_err());
        assert!(issue_token(&alice, Duration::ZERO).is_err());
        assert!(issue_token(&alice, MAX_TOKEN_TTL).is_ok());
        // A key that is not the certificate's.
        let mixed = TlsFiles {
            key: n1.key.clone(),
            ..alice
        };
        let e = issue_token(&mixed, Duration::from_secs(60)).unwrap_err();
        assert!(e.to_string().contains("does not belong"), "{e}");
    }
}
