//! Tags on objects (environments, policies, queues, quota shares), as the AWS
//! Batch-compatible endpoint sets and lists them.

use crate::error::{invalid, ValidationError};
use std::collections::BTreeMap;

/// Most tags on one object (AWS's limit).
pub const MAX_OBJECT_TAGS: usize = 50;
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
