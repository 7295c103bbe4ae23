//! What the AWS Batch-compatible endpoint keeps beside the quota objects: access keys
//! (SigV4 credentials, each acting as one Tranche identity), tags on objects, and a
//! SageMaker training job's part of a job spec.
//!
//! An access key's secret is never stored: a controller derives it from the key's id
//! and the cluster's key secret file (outside the data dir), so the replicated record
//! below holds nothing a reader of a data dir could sign with.

use crate::error::{invalid, ValidationError};
use crate::ids::UserName;
use crate::Millis;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::fmt;

/// Longest access key id accepted (AWS's are 20 characters; ours are too).
pub const MAX_ACCESS_KEY_ID_LEN: usize = 128;
/// Most tags on one object (AWS's limit).
pub const MAX_OBJECT_TAGS: usize = 50;
/// Most hyperparameters of one training job (SageMaker's limit).
pub const MAX_HYPERPARAMETERS: usize = 100;
/// Most input channels of one training job (SageMaker's limit).
pub const MAX_CHANNELS: usize = 20;

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

/// Checks an AWS tag map: 0–50 tags, keys 1–128 characters, values at most 256.
pub fn validate_tags(tags: &BTreeMap<String, String>, field: &str) -> Result<(), ValidationError> {
    if tags.len() > MAX_OBJECT_TAGS {
        return Err(invalid(
            field,
            format!("at most {MAX_OBJECT_TAGS} tags, got {}", tags.len()),
        ));
    }
    for (k, v) in tags {
        if k.is_empty() || k.chars().count() > 128 {
            return Err(invalid(
                format!("{field}.{k}"),
                "a tag key must be 1 to 128 characters",
            ));
        }
        if k.starts_with("aws:") {
            return Err(invalid(
                format!("{field}.{k}"),
                "tag keys starting with `aws:` are reserved",
            ));
        }
        if v.chars().count() > 256 {
            return Err(invalid(
                format!("{field}.{k}"),
                "a tag value must be at most 256 characters",
            ));
        }
    }
    Ok(())
}

/// A SageMaker training job's part of a job spec: what the node needs to give the
/// container SageMaker's contract (`/opt/ml/input/config/*.json`, `/opt/ml/model`,
/// `/opt/ml/output`, the `SM_*` variables), and the request as it was sent.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SageMakerJob {
    /// `TrainingJobName` of the request (the job's name when it had none).
    pub training_job_name: String,
    /// `HyperParameters`, as strings (SageMaker passes them as strings).
    pub hyperparameters: BTreeMap<String, String>,
    /// `FileSystemDataSource` channels: channel name → a directory on the nodes,
    /// mounted read-only at `/opt/ml/input/data/<channel>`.
    pub channels: BTreeMap<String, String>,
    /// The `CreateTrainingJob` request (`serviceRequestPayload`), as it was sent.
    pub payload: String,
    /// The AWS instance type the job asked for (`ResourceConfig.InstanceType`).
    pub instance_type: String,
}

/// Most bytes of a hyperparameter's name and value (SageMaker's limits).
pub const MAX_HYPERPARAMETER_KEY_BYTES: usize = 256;
pub const MAX_HYPERPARAMETER_VALUE_BYTES: usize = 2500;

impl SageMakerJob {
    pub fn validate(&self) -> Result<(), ValidationError> {
        for (field, v, max) in [
            ("TrainingJobName", &self.training_job_name, 128),
            ("ResourceConfig.InstanceType", &self.instance_type, 64),
        ] {
            if v.len() > max {
                return Err(invalid(
                    field,
                    format!("must be at most {max} bytes, got {}", v.len()),
                ));
            }
        }
        for (k, v) in &self.hyperparameters {
            if k.len() > MAX_HYPERPARAMETER_KEY_BYTES || v.len() > MAX_HYPERPARAMETER_VALUE_BYTES {
                return Err(invalid(
                    "HyperParameters",
                    format!(
                        "a name must be at most {MAX_HYPERPARAMETER_KEY_BYTES} bytes and a value at most {MAX_HYPERPARAMETER_VALUE_BYTES}, got {} and {}",
                        k.len(),
                        v.len()
                    ),
                ));
            }
        }
        if self.hyperparameters.len() > MAX_HYPERPARAMETERS {
            return Err(invalid(
                "HyperParameters",
                format!("at most {MAX_HYPERPARAMETERS} entries"),
            ));
        }
        if self.channels.len() > MAX_CHANNELS {
            return Err(invalid(
                "InputDataConfig",
                format!("at most {MAX_CHANNELS} channels"),
            ));
        }
        for (name, path) in &self.channels {
            if name.is_empty()
                || name.len() > 64
                || !name
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
            {
                return Err(invalid(
                    "InputDataConfig.ChannelName",
                    format!("`{name}`: must be 1 to 64 letters, digits, `-` or `_`"),
                ));
            }
            if !path.starts_with('/') || path.len() > crate::MAX_PATH_BYTES {
                return Err(invalid(
                    format!("InputDataConfig.{name}.DirectoryPath"),
                    format!(
                        "must be an absolute path of at most {} bytes",
                        crate::MAX_PATH_BYTES
                    ),
                ));
            }
        }
        Ok(())
    }
}
