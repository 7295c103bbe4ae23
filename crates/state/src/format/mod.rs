//! The state's stored form in each format version this build reads, and the migration
//! from the older one. An image's envelope (see [`crate::codec`]) says which version its
//! state bytes are in.
//!
//! Format 1 kept each node's last heartbeat in the replicated state (heartbeats were
//! log entries); format 2 keeps liveness as the leader's soft state, so its nodes have
//! no such field. Format 3 adds a job's working directory (`JobSpec::cwd`), so its job
//! specs, jobs, commands and states differ from format 2's. Format 4 adds arrays,
//! dependencies, holds and output paths (`JobSpec::{array, dependency, hold, output,
//! error}`, `Job::{array, deps, held}`) and names jobs in commands as `42` or `42_7`
//! (`JobRef`). Format 5 adds the AWS Batch-compatible endpoint's part: a SageMaker
//! training job's part of a spec (`JobSpec::sagemaker`), the state's access keys and
//! tags (`State::keys`, `State::tags`), and the commands that change them (`PutAccessKey`,
//! `RevokeAccessKey`, `TagResource`, `UntagResource`, appended). Format 6 adds a
//! quota share's `max_user_priority` and job limits, an access key's issuer serial
//! and expiry, each share's and user's submits of the current minute
//! (`State::submit_rate`), and keys client sessions by (identity, client id): a
//! request id carries the caller's identity. Format 7 appends the command that drops
//! ended jobs from the state (`ForgetEnded`); its states are stored as format 6's, and
//! a format-6 log entry reads as a format-7 one. Format 8 adds the loan contract and
//! checkpoints: a job's checkpoint interval (`Checkpoint::every_s`), an
//! attempt's latest reported checkpoint (`Attempt::checkpointed_at`), a share's loan
//! terms (`QuotaShare::loans`) and fair-share weight (`QuotaShare::weight`), and the
//! ledger's count of work lost since preempted attempts' checkpoints
//! (`Totals::work_lost`); a scheduling policy's `FAIR_SHARE` is an appended variant
//! of `IdleAssignment`, so a format-7 policy reads unchanged. Format 9 adds groups of
//! quota shares (`State::groups`) and appends their commands (`PutGroup`,
//! `DeleteGroup`), so a format-8 log entry reads as a format-9 one. Reading an older
//! format goes through each newer one in turn (1 → 2 → 3 → 4 → 5 → 6 = 7 → 8 → 9).
//!
//! Each frozen format has a file of its own, `vN.rs`, holding only the types of format N
//! that differ from the next format's, as that release wrote them, and their conversions
//! to the next format's types (today's, `crate::…`, for the newest). This file decodes
//! the state of any format and runs the migration chain; [`codec::FORMAT`] is the
//! format this build writes.
//!
//! # Adding a format
//!
//! When a change alters a type that is stored (in the state, a command or a log entry),
//! the format that ends, N, is frozen and N + 1 becomes today's:
//!
//! 1. Raise [`codec::FORMAT`] to N + 1 and add it to [`codec::FORMATS_READ`].
//! 2. Add `vN.rs` and its `pub mod vN;` line here: copy into it today's definitions of
//!    the types the change alters, and of the types that hold them (`State`, `Command`,
//!    `Proposal`, …), before the change, with a `From` conversion from each to today's
//!    type that fills what is new with the value an older entry means.
//! 3. Point the newest older module's conversions at `vN`'s types wherever `vN` now
//!    has the type (they targeted today's).
//! 4. In [`decode_state`], read format N as `vN::State` and run the older formats
//!    through it; do the same for log entries where the peer protocol reads a
//!    `Proposal` of any format. A format that changes no stored state (format 7 only
//!    appended a command) needs no state arm: it reads as the format before it.
//! 5. Add a test to `tests.rs` that a format-N value becomes today's as it should, and
//!    check in a fixture of format N + 1 (`write_fixture` in the controller's
//!    `tests/upgrade.rs`) so that the next release proves it reads this one.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use tranche_model::*;

use crate::codec::{self, FormatError};
use crate::session::Session;
use crate::state::State;

pub mod v1;
pub mod v2;
pub mod v3;
pub mod v4;
pub mod v5;
pub mod v7;
pub mod v8;

/// Decodes state bytes written in format `version` and migrates them to today's
/// state (indexes rebuilt).
pub fn decode_state(version: u16, bytes: &[u8]) -> Result<State, FormatError> {
    fn read<T: serde::de::DeserializeOwned>(version: u16, bytes: &[u8]) -> Result<T, FormatError> {
        codec::decode(bytes).map_err(|reason| FormatError::Decode { version, reason })
    }
    let v5: v5::State = match version {
        1 => {
            let v2: v2::State = read::<v1::State>(version, bytes)?.into();
            let v3: v3::State = v2.into();
            let v4: v4::State = v3.into();
            v4.into()
        }
        2 => {
            let v3: v3::State = read::<v2::State>(version, bytes)?.into();
            let v4: v4::State = v3.into();
            v4.into()
        }
        3 => {
            let v4: v4::State = read::<v3::State>(version, bytes)?.into();
            v4.into()
        }
        4 => read::<v4::State>(version, bytes)?.into(),
        5 => read(version, bytes)?,
        // Format 7 stores the state as format 6 did.
        6 | 7 => return Ok(read::<v7::State>(version, bytes)?.into()),
        8 => return Ok(read::<v8::State>(version, bytes)?.into()),
        codec::FORMAT => {
            return State::restore(bytes).map_err(|e| FormatError::Decode {
                version,
                reason: e.to_string(),
            });
        }
        found => return Err(FormatError::Unknown { found }),
    };
    Ok(v5.into())
}

#[cfg(test)]
mod tests;
