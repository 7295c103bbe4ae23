//! Where the client protocol meets the state machine: an authorized client's command
//! becomes the replicated [`Command`] ([`command`]), and the state machine's answers
//! become the protocol's ([`tranche_proto::Outcome`], [`Refusal`], [`LedgerTotals`]).
//! The protocol's answer types mirror the state's field for field, with the same
//! encoding; the tests below hold the two to the same bytes, so a change to either side
//! shows here before it reaches a client.

use tranche_model::AccessKey;
use tranche_proto::{ClientCommand, GpuTimes, LedgerTotals, PlanOutcome, Refusal};
use tranche_state::ledger::{Bucket, Totals};
use tranche_state::{ApplyError, Command};

/// The replicated command a client's command becomes once authorized.
///
/// `IssueAccessKey` needs the id and the time the controller gives it: the service
/// turns it into [`Command::PutAccessKey`] itself. Here it becomes a key with an empty
/// id, which the state machine refuses, so that nothing is issued by mistake.
pub fn command(c: ClientCommand) -> Command {
    use ClientCommand as C;
    match c {
        C::PutEnvironment(e) => Command::PutEnvironment(e),
        C::DeleteEnvironment(n) => Command::DeleteEnvironment(n),
        C::PutPolicy(p) => Command::PutPolicy(p),
        C::DeletePolicy(n) => Command::DeletePolicy(n),
        C::PutQueue(q) => Command::PutQueue(q),
        C::DeleteQueue(n) => Command::DeleteQueue(n),
        C::PutShare(s) => Command::PutShare(s),
        C::DeleteShare(n) => Command::DeleteShare(n),
        C::Submit(spec) => Command::Submit(spec),
        C::Cancel { job, reason } => Command::Cancel { job, reason },
        C::UpdatePriority { job, priority } => Command::UpdatePriority { job, priority },
        C::Hold { job } => Command::Hold { job },
        C::Release { job } => Command::Release { job },
        C::DrainNode { node, reason, now } => Command::DrainNode { node, reason, now },
        C::ResumeNode { node } => Command::ResumeNode { node },
        C::RegisterNode(inv) => Command::RegisterNode(inv),
        C::JobProgress {
            job,
            attempt,
            event,
        } => Command::JobProgress {
            job,
            attempt,
            event,
        },
        C::TagResource { resource, tags } => Command::TagResource { resource, tags },
        C::UntagResource { resource, keys } => Command::UntagResource { resource, keys },
        C::IssueAccessKey { user, role } => Command::PutAccessKey(AccessKey {
            id: String::new(),
            user,
            role,
            created_at: 0,
            revoked_at: None,
            issuer_serial: None,
            expires_at: None,
        }),
        C::RevokeAccessKey { id } => Command::RevokeAccessKey { id },
        C::PutGroup(g) => Command::PutGroup(g),
        C::DeleteGroup(n) => Command::DeleteGroup(n),
    }
}

/// A committed write's answer as a client reads it.
pub fn outcome(o: tranche_state::Outcome) -> tranche_proto::Outcome {
    use tranche_state::Outcome as O;
    match o {
        O::Done => tranche_proto::Outcome::Done,
        O::Submitted { job, existing } => tranche_proto::Outcome::Submitted { job, existing },
        O::Plan(p) => tranche_proto::Outcome::Plan(PlanOutcome {
            applied: p.applied,
            rejected: p
                .rejected
                .into_iter()
                .map(|(i, e)| (i, refusal(e)))
                .collect(),
        }),
    }
}

/// Why the state machine refused a command, as a client reads it.
pub fn refusal(e: ApplyError) -> Refusal {
    match e {
        ApplyError::Invalid(v) => Refusal::Invalid(v),
        ApplyError::NotFound { kind, name } => Refusal::NotFound { kind, name },
        ApplyError::Conflict(m) => Refusal::Conflict(m),
        ApplyError::Stale(m) => Refusal::Stale(m),
    }
}

/// The ledger's figures over a range, as a report carries them.
pub fn ledger_totals(b: Bucket) -> LedgerTotals {
    LedgerTotals {
        shares: b
            .shares
            .into_iter()
            .map(|(k, t)| (k, gpu_times(t)))
            .collect(),
        users: b
            .users
            .into_iter()
            .map(|(k, t)| (k, gpu_times(t)))
            .collect(),
        capacity: b.capacity,
        unassigned_lent: b.unassigned_lent,
    }
}

fn gpu_times(t: Totals) -> GpuTimes {
    GpuTimes {
        used: t.used,
        borrowed: t.borrowed,
        lent: t.lent,
        reserved_idle: t.reserved_idle,
        lost_reclaim: t.lost_reclaim,
        lost_in_share: t.lost_in_share,
        lost_drain: t.lost_drain,
        work_lost: t.work_lost,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tranche_model::{JobId, ValidationError};
    use tranche_proto::frame::encode;

    fn refusals() -> Vec<ApplyError> {
        vec![
            ApplyError::Invalid(ValidationError::new("priority", "must be 0-9999")),
            ApplyError::NotFound {
                kind: "share".into(),
                name: "s".into(),
            },
            ApplyError::Conflict("already exists".into()),
            ApplyError::Stale("node n1 is draining".into()),
        ]
    }

    // Each value is encoded as the client protocol frames it.

    #[test]
    fn refusals_encode_as_the_state_machines() {
        for e in refusals() {
            let text = e.to_string();
            let bytes = encode(&e);
            let r = refusal(e);
            assert_eq!(encode(&r), bytes, "{r:?}");
            assert_eq!(r.to_string(), text);
        }
    }

    #[test]
    fn outcomes_encode_as_the_state_machines() {
        let outcomes = vec![
            tranche_state::Outcome::Done,
            tranche_state::Outcome::Submitted {
                job: JobId(42),
                existing: true,
            },
            tranche_state::Outcome::Plan(tranche_state::PlanOutcome {
                applied: 3,
                rejected: refusals()
                    .into_iter()
                    .enumerate()
                    .map(|(i, e)| (i as u32, e))
                    .collect(),
            }),
        ];
        for o in outcomes {
            let bytes = encode(&o);
            let p = outcome(o);
            assert_eq!(encode(&p), bytes, "{p:?}");
        }
    }

    #[test]
    fn ledger_totals_encode_as_the_state_machines_bucket() {
        let t = |n: u64| Totals {
            used: n,
            borrowed: n + 1,
            lent: n + 2,
            reserved_idle: n + 3,
            lost_reclaim: n + 4,
            lost_in_share: n + 5,
            lost_drain: n + 6,
            work_lost: n + 7,
        };
        let mut b = Bucket::default();
        b.shares.insert(("s".into(), "h100".into()), t(10));
        b.shares.insert(("t".into(), "a100".into()), t(20));
        b.users.insert(("alice".into(), "h100".into()), t(30));
        b.capacity.insert("h100".into(), 7_200_000);
        b.unassigned_lent.insert("a100".into(), 5);
        let bytes = encode(&b);
        let by_unit = b.by_unit();
        let lost = t(10).lost();
        let l = ledger_totals(b);
        assert_eq!(encode(&l), bytes);
        assert_eq!(encode(&l.by_unit()), encode(&by_unit));
        assert_eq!(gpu_times(t(10)).lost(), lost);
        assert_eq!(
            encode(&ledger_totals(Bucket::default())),
            encode(&Bucket::default())
        );
    }
}
