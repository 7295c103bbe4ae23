//! Tranche's object model: the typed ids and objects of `docs/design.md` §2 (service
//! environments, scheduling policies, job queues, quota shares, jobs, nodes) and their
//! validation.
//!
//! It also reads the policy file (TOML, [`policy_file`]) and holds the size and nesting
//! limits of the files admins hand to Tranche ([`text_limits`]).
//!
//! This crate is the bottom of the dependency graph. It may depend on serde, thiserror
//! and toml only; it must never do I/O, read the wall clock, or know about the
//! network, storage or processes. Every validation error names the field and the rule,
//! so that the CLI, the controller and the scenario runner can show it as it is.

mod array;
mod error;
mod ids;
mod job;
mod keys;
mod node;
mod objects;
pub mod policy_file;
mod progress;
mod redact;
mod sagemaker;
mod standing;
mod tags;
pub mod text_limits;

pub use array::*;
pub use error::ValidationError;
pub use ids::*;
pub use job::*;
pub use keys::*;
pub use node::*;
pub use objects::*;
pub use progress::Progress;
pub use redact::REDACTED_FIELDS;
pub use sagemaker::*;
pub use standing::*;
pub use tags::*;

/// Milliseconds since the Unix epoch (controller) or since the start of a scenario
/// (virtual time). The pure core never reads a clock: every time comes in as this.
pub type Millis = u64;

/// Milliseconds in one second, for converting the seconds users write.
pub const SECOND: Millis = 1000;
