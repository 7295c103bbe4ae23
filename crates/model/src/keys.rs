//! Access keys: SigV4 credentials for the AWS Batch-compatible endpoint, each acting as
//! one Tranche identity.
//!
//! An access key's secret is never stored: a controller derives it from the key's id
//! and the cluster's key secret file (outside the data dir), so the replicated record
//! below holds nothing a reader of a data dir could sign with.

use crate::error::{invalid, ValidationError};
use crate::ids::UserName;
use crate::Millis;
use serde::{Deserialize, Serialize};
use std::fmt;

/// Longest access key id accepted (AWS's are 20 characters; ours are too).
pub const MAX_ACCESS_KEY_ID_LEN: usize = 128;
/// The role an access key acts with.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum KeyRole {
    User,
    Operator,
    Admin,
}

impl KeyRole {
    pub fn parse(s: &str) -> Option<KeyRole> {
        match s {
            "user" => Some(KeyRole::User),
            "operator" => Some(KeyRole::Operator),
            "admin" => Some(KeyRole::Admin),
            _ => None,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            KeyRole::User => "user",
            KeyRole::Operator => "operator",
            KeyRole::Admin => "admin",
        }
    }
}

impl fmt::Display for KeyRole {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// An access key: its id, whom it acts as, and when it was issued and revoked.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AccessKey {
    /// `TK` then 18 upper-case letters and digits (20 characters, as AWS's).
    pub id: String,
    /// The identity's name: a user name, or the operator's or admin's name.
    pub user: UserName,
    pub role: KeyRole,
    pub created_at: Millis,
    /// Set once `tranche keys revoke` ran; a revoked key signs nothing.
    pub revoked_at: Option<Millis>,
    /// The serial number, in lower-case hex, of the certificate of the identity that
    /// issued the key, so that revoking that certificate can end the key too. `None`
    /// for keys issued before stored format 6, and where the issuer's serial was not
    /// known.
    pub issuer_serial: Option<String>,
    /// When the key stops signing (entry time, ms); `None`: it does not expire.
    pub expires_at: Option<Millis>,
}

impl AccessKey {
    pub fn validate(&self) -> Result<(), ValidationError> {
        if self.id.is_empty()
            || self.id.len() > MAX_ACCESS_KEY_ID_LEN
            || !self.id.bytes().all(|b| b.is_ascii_alphanumeric())
        {
            return Err(invalid(
                "id",
                format!("must be 1 to {MAX_ACCESS_KEY_ID_LEN} ASCII letters and digits"),
            ));
        }
        if let Some(serial) = &self.issuer_serial {
            // RFC 5280: a serial number is at most 20 octets.
            if serial.is_empty()
                || serial.len() > 40
                || !serial.bytes().all(|b| b.is_ascii_hexdigit())
            {
                return Err(invalid(
                    "issuer_serial",
                    format!(
                        "must be 1 to 40 hexadecimal digits (a certificate serial of at most 20 bytes), got {} characters",
                        serial.len()
                    ),
                ));
            }
        }
        self.user.validate("user")
    }
}
