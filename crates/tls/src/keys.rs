//! Access keys: their ids, and their secrets, derived from the cluster's key secret
//! file (the same file on every controller, outside the data dir). No secret is ever
//! stored: the replicated access key (the model's `AccessKey`) holds the id, and any controller
//! derives the secret from the id and the file when it issues the key or checks a
//! signature.

use std::io::Write;
use std::path::Path;

use base64::Engine;
use ring::rand::{SecureRandom, SystemRandom};

/// The shortest key secret file accepted, in bytes (after a trailing newline).
pub const MIN_KEY_SECRET_LEN: usize = 32;

/// The length of an access key id: `TK` and 18 letters and digits, as AWS's.
pub const KEY_ID_LEN: usize = 20;

/// The length of an access key's secret (as AWS's secret access keys).
pub const SECRET_LEN: usize = 40;

/// What is hashed with a key id, so that a secret derived for an access key is never
/// the HMAC of anything else the key secret may sign.
const DERIVE_DOMAIN: &[u8] = b"tranche access key secret v1\0";

const ID_ALPHABET: &[u8; 36] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";

/// The cluster's key secret, as read from its file. Its `Debug` shows no byte of it.
#[derive(Clone)]
pub struct KeySecret(Vec<u8>);

impl std::fmt::Debug for KeySecret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "KeySecret({} bytes)", self.0.len())
    }
}

impl KeySecret {
    /// A key secret of these bytes; refused when shorter than [`MIN_KEY_SECRET_LEN`].
    pub fn from_bytes(bytes: Vec<u8>) -> Result<KeySecret, String> {
        if bytes.len() < MIN_KEY_SECRET_LEN {
            return Err(format!(
                "a key secret must be at least {MIN_KEY_SECRET_LEN} bytes, got {}",
                bytes.len()
            ));
        }
        Ok(KeySecret(bytes))
    }

    /// The secret of access key `key_id` (see [`derive_secret`]).
    pub fn secret_of(&self, key_id: &str) -> String {
        derive_secret(&self.0, key_id)
    }

    /// The key secret's bytes (the `master` of [`derive_secret`]).
    pub fn as_bytes(&self) -> &[u8] {
        &self.0
    }
}

/// [`load_key_secret_file`], as its bytes.
pub fn load_key_secret(path: &Path) -> Result<Vec<u8>, String> {
    load_key_secret_file(path).map(|k| k.0)
}

/// Reads the key secret file at `path`: its bytes, less one trailing newline, at least
/// [`MIN_KEY_SECRET_LEN`] of them, in a file no one but its owner may read or write.
pub fn load_key_secret_file(path: &Path) -> Result<KeySecret, String> {
    use std::os::unix::fs::PermissionsExt;
    let meta =
        std::fs::metadata(path).map_err(|e| format!("key secret file {}: {e}", path.display()))?;
    if !meta.is_file() {
        return Err(format!(
            "key secret file {}: not a regular file",
            path.display()
        ));
    }
    let mode = meta.permissions().mode() & 0o777;
    if mode & 0o077 != 0 {
        return Err(format!(
            "key secret file {}: its mode is {mode:04o}, but no one but its owner may read \
             or write it (mode 0600 or stricter); run `chmod 600 {}`",
            path.display(),
            path.display()
        ));
    }
    let mut bytes =
        std::fs::read(path).map_err(|e| format!("key secret file {}: {e}", path.display()))?;
    if bytes.last() == Some(&b'\n') {
        bytes.pop();
        if bytes.last() == Some(&b'\r') {
            bytes.pop();
        }
    }
    KeySecret::from_bytes(bytes).map_err(|e| {
        format!(
            "key secret file {}: {e}; make one with 48 random bytes, e.g. \
             `(umask 077; head -c 48 /dev/urandom | base64 -w0 > {})`",
            path.display(),
            path.display()
        )
    })
}

/// Creates a new key secret file at `path` (mode 0600; refused when it exists): 48
/// random bytes, base64-encoded (64 characters), and a newline.
pub fn write_key_secret_file(path: &Path) -> Result<(), String> {
    use std::os::unix::fs::OpenOptionsExt;
    let mut raw = [0u8; 48];
    SystemRandom::new()
        .fill(&mut raw)
        .map_err(|_| "the system's random number generator failed".to_string())?;
    let text = base64::engine::general_purpose::STANDARD.encode(raw) + "\n";
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
        .map_err(|e| format!("key secret file {}: {e}", path.display()))?;
    f.write_all(text.as_bytes())
        .and_then(|()| f.sync_all())
        .map_err(|e| format!("key secret file {}: {e}", path.display()))
}

/// A new access key id: `TK` and 18 random upper-case letters and digits.
pub fn new_key_id() -> String {
    let rng = SystemRandom::new();
    let mut id = String::with_capacity(KEY_ID_LEN);
    id.push_str("TK");
    let mut buf = [0u8; 32];
    while id.len() < KEY_ID_LEN {
        rng.fill(&mut buf)
            .expect("the system's random number generator");
        // 252 = 7 × 36: bytes above it are dropped, so every symbol is equally likely.
        for &b in buf.iter().filter(|&&b| b < 252) {
            if id.len() == KEY_ID_LEN {
                break;
            }
            id.push(ID_ALPHABET[(b % 36) as usize] as char);
        }
    }
    id
}

/// The secret of access key `key_id` under the cluster's key secret `master`:
/// HMAC-SHA256 of a domain-separated id, base64 (standard alphabet, no padding), its
/// first 40 characters (240 bits), like an AWS secret access key.
pub fn derive_secret(master: &[u8], key_id: &str) -> String {
    let key = ring::hmac::Key::new(ring::hmac::HMAC_SHA256, master);
    let mut msg = DERIVE_DOMAIN.to_vec();
    msg.extend_from_slice(key_id.as_bytes());
    let tag = ring::hmac::sign(&key, &msg);
    let mut s = base64::engine::general_purpose::STANDARD_NO_PAD.encode(tag.as_ref());
    s.truncate(SECRET_LEN);
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn key_ids_look_like_aws_ones_and_differ() {
        let a = new_key_id();
        let b = new_key_id();
        assert_ne!(a, b);
        for id in [&a, &b] {
            assert_eq!(id.len(), KEY_ID_LEN, "{id}");
            assert!(id.starts_with("TK"), "{id}");
            assert!(
                id.bytes()
                    .all(|c| c.is_ascii_uppercase() || c.is_ascii_digit()),
                "{id}"
            );
        }
        let k = tranche_model::AccessKey {
            id: a,
            user: "alice".into(),
            role: tranche_model::KeyRole::User,
            created_at: 0,
            revoked_at: None,
            issuer_serial: None,
            expires_at: None,
        };
        k.validate().unwrap();
    }

    #[test]
    fn secrets_are_stable_per_id_and_master_and_40_characters() {
        let m = [7u8; 32];
        let s = derive_secret(&m, "TKAAAAAAAAAAAAAAAAAA");
        assert_eq!(s.len(), SECRET_LEN);
        assert!(s
            .bytes()
            .all(|c| c.is_ascii_alphanumeric() || c == b'+' || c == b'/'));
        assert_eq!(s, derive_secret(&m, "TKAAAAAAAAAAAAAAAAAA"));
        assert_ne!(s, derive_secret(&m, "TKAAAAAAAAAAAAAAAAAB"));
        assert_ne!(s, derive_secret(&[8u8; 32], "TKAAAAAAAAAAAAAAAAAA"));
        // Fixed (computed with Python's hmac and base64), so that a change of the
        // derivation, which would invalidate every issued key, cannot go unnoticed.
        assert_eq!(s, "Odnby8fckc2QUasktEGOmLPVdGhzc6jhGbWGfdzF");
        let again = KeySecret::from_bytes(m.to_vec()).unwrap();
        assert_eq!(again.secret_of("TKAAAAAAAAAAAAAAAAAA"), s);
    }

    #[test]
    fn the_file_is_written_private_and_read_back_and_bad_ones_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("key-secret");
        write_key_secret_file(&p).unwrap();
        assert_eq!(
            std::fs::metadata(&p).unwrap().permissions().mode() & 0o777,
            0o600
        );
        let k = load_key_secret_file(&p).unwrap();
        assert_eq!(k.0.len(), 64, "48 bytes in base64, the newline dropped");
        assert!(
            write_key_secret_file(&p).is_err(),
            "an existing file is kept"
        );
        assert!(!format!("{k:?}").contains(&String::from_utf8_lossy(&k.0).to_string()));

        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o640)).unwrap();
        let e = load_key_secret_file(&p).unwrap_err();
        assert!(
            e.contains(&p.display().to_string()) && e.contains("0600"),
            "{e}"
        );

        let short = dir.path().join("short");
        std::fs::write(&short, "0123456789abcdef0123456789abcde\n").unwrap();
        std::fs::set_permissions(&short, std::fs::Permissions::from_mode(0o600)).unwrap();
        let e = load_key_secret_file(&short).unwrap_err();
        assert!(
            e.contains(&short.display().to_string()) && e.contains("at least 32 bytes"),
            "{e}"
        );
        let e = load_key_secret_file(&dir.path().join("missing")).unwrap_err();
        assert!(e.contains("missing"), "{e}");
    }
}
