//! Typed ids. A share name is never confused with a node name or a job id, even where
//! both are strings on the wire.

use crate::error::{invalid, ValidationError};
use serde::{Deserialize, Serialize};
use std::fmt;

/// The characters and length allowed in a name of each kind.
#[derive(Clone, Copy)]
struct NameRule {
    what: &'static str,
    max_len: usize,
    extra: &'static str,
}

fn check_name(rule: NameRule, field: &str, s: &str) -> Result<(), ValidationError> {
    if s.is_empty() {
        return Err(invalid(field, format!("{} must not be empty", rule.what)));
    }
    let len = s.chars().count();
    if len > rule.max_len {
        return Err(invalid(
            field,
            format!(
                "{} must be at most {} characters, got {len}",
                rule.what, rule.max_len
            ),
        ));
    }
    if let Some(bad) = s
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || *c == '_' || *c == '-' || rule.extra.contains(*c)))
    {
        return Err(invalid(
            field,
            format!(
                "{} may contain only [A-Za-z0-9_-{}], found {bad:?}",
                rule.what, rule.extra
            ),
        ));
    }
    Ok(())
}

macro_rules! name_type {
    ($(#[$doc:meta])* $name:ident, $what:literal, $max:literal, $extra:literal) => {
        $(#[$doc])*
        #[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
        #[serde(transparent)]
        pub struct $name(pub String);

        impl $name {
            pub fn new(s: impl Into<String>) -> Self {
                $name(s.into())
            }
            pub fn as_str(&self) -> &str {
                &self.0
            }
            /// Checks charset and length; `field` names the field in the error.
            pub fn validate(&self, field: &str) -> Result<(), ValidationError> {
                check_name(NameRule { what: $what, max_len: $max, extra: $extra }, field, &self.0)
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(&self.0)
            }
        }

        impl From<&str> for $name {
            fn from(s: &str) -> Self {
                $name(s.to_string())
            }
        }
    };
}

name_type!(
    /// Name of a service environment (a pool of nodes).
    EnvName, "an environment name", 128, "");
name_type!(
    /// Name of a scheduling policy.
    PolicyName, "a policy name", 128, "");
name_type!(
    /// Name of a job queue.
    QueueName, "a queue name", 128, "");
name_type!(
    /// Name of a quota share.
    ShareName, "a quota share name", 128, "");
name_type!(
    /// Name of a node (the agent's certificate name).
    NodeName, "a node name", 128, ".");
name_type!(
    /// A capacity unit: a GPU class such as `h100` or `a100-80gb`.
    Unit, "a capacity unit", 64, ".");
name_type!(
    /// A user or group name, as carried in a user certificate.
    UserName, "a user name", 64, ".");
name_type!(
    /// A job's own name (not unique; ids are).
    JobName, "a job name", 128, ".");

/// A job id, assigned by the state machine in submit order, never reused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct JobId(pub u64);

impl fmt::Display for JobId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

/// A GPU's index on its node (NVML's index).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct GpuIndex(pub u32);

impl fmt::Display for GpuIndex {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

/// Which request of which client a command is: the key under which the state machine
/// applies a client's write at most once, however often it is retried (see
/// `tranche_state::session`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RequestId {
    /// Who sent it (`role:name`, the certificate identity's text). A client sends it
    /// empty; the controller that receives the request replaces it with the caller's
    /// identity before it proposes the command, so a client cannot choose it.
    pub identity: String,
    /// Chosen at random by the client, once per process.
    pub client: u64,
    /// 1, 2, 3... per client; retries of a request keep its number.
    pub seq: u64,
    /// The lowest number the client still waits for an answer to.
    pub first_incomplete: u64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn share_names_follow_charset_and_length() {
        assert!(ShareName::from("vision-team_2").validate("name").is_ok());
        let e = ShareName::from("vision team").validate("name").unwrap_err();
        assert_eq!(e.field, "name");
        assert!(e.rule.contains("[A-Za-z0-9_-]"), "{e}");
        let long = ShareName("a".repeat(129)).validate("name").unwrap_err();
        assert!(long.rule.contains("at most 128"), "{long}");
        assert!(ShareName("a".repeat(128)).validate("name").is_ok());
        assert!(ShareName::from("")
            .validate("name")
            .unwrap_err()
            .rule
            .contains("empty"));
    }

    #[test]
    fn node_names_may_contain_dots_share_names_may_not() {
        assert!(NodeName::from("gpu01.rack3").validate("node").is_ok());
        assert!(ShareName::from("a.b").validate("share").is_err());
    }
}
