use std::fmt;

/// A rejected field: which one (a dotted path such as `capacity_limits[1].max`) and the
/// rule it broke, in words a user can act on.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error, serde::Serialize, serde::Deserialize)]
pub struct ValidationError {
    pub field: String,
    pub rule: String,
}

impl ValidationError {
    pub fn new(field: impl Into<String>, rule: impl Into<String>) -> Self {
        ValidationError {
            field: field.into(),
            rule: rule.into(),
        }
    }
}

impl fmt::Display for ValidationError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "invalid `{}`: {}", self.field, self.rule)
    }
}

/// Shorthand used by the validators: `Err(invalid("priority", "must be 0-9999, got 12000"))`.
pub(crate) fn invalid(field: impl Into<String>, rule: impl Into<String>) -> ValidationError {
    ValidationError::new(field, rule)
}
