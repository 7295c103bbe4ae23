//! The state machine's contract for the commands users send: a rejected command
//! changes nothing and names its rule, and a submit is idempotent by its client token.

mod common;

use common::*;
use tranche_model::*;
use tranche_state::*;

#[test]
fn rejected_commands_change_nothing_and_name_the_rule() {
    let mut st = cluster();
    let before = st.snapshot();
    let mut bad = share("c", Strategy::Lend, 8);
    bad.resource_sharing.borrow_limit = Some(10);
    let cases: Vec<(Command, &str)> = vec![
        (
            Command::PutShare(bad),
            "only allowed with strategy LEND_AND_BORROW",
        ),
        (
            Command::DeleteShare("a".into()),
            "must be DISABLED before it is deleted",
        ),
        (
            Command::Submit(JobSpec::new("j", "q", "nope", "alice", "h100", 1, 1)),
            "quota share nope does not exist",
        ),
        (
            Command::Submit(JobSpec::new("j", "q", "a", "alice", "a100", 1, 1)),
            "unknown unit",
        ),
        (
            Command::Submit(JobSpec {
                priority: 10_000,
                ..JobSpec::new("j", "q", "a", "alice", "h100", 1, 1)
            }),
            "0-9999",
        ),
        (
            Command::Cancel {
                job: JobRef::job(JobId(99)),
                reason: String::new(),
            },
            "job 99 does not exist",
        ),
        (
            Command::DrainNode {
                node: "n1".into(),
                reason: " ".into(),
                now: false,
            },
            "needs a reason",
        ),
        (Command::DeleteEnvironment("gpu".into()), "used by queue q"),
    ];
    for (cmd, rule) in cases {
        let e = st.apply(&cmd, 5).expect_err("must be refused");
        assert!(e.to_string().contains(rule), "{e} should say {rule}");
        assert_eq!(st.snapshot(), before, "{cmd:?} changed the state");
    }
}

#[test]
fn a_queue_takes_at_most_twenty_shares() {
    let mut st = cluster();
    for i in 0..18 {
        ok(
            &mut st,
            Command::PutShare(share(&format!("s{i}"), Strategy::Lend, 1)),
            0,
        );
    }
    let e = st
        .apply(
            &Command::PutShare(share("one-too-many", Strategy::Lend, 1)),
            0,
        )
        .unwrap_err();
    assert!(e.to_string().contains("at most 20"), "{e}");
    // Updating an existing share is not adding one.
    ok(
        &mut st,
        Command::PutShare(share("s0", Strategy::Reserve, 2)),
        0,
    );
}

#[test]
fn grace_above_the_share_max_is_refused() {
    let mut st = cluster();
    let mut spec = JobSpec::new("j", "q", "a", "alice", "h100", 1, 1);
    spec.checkpoint.grace_s = Some(601);
    let e = st.apply(&Command::Submit(spec), 0).unwrap_err();
    assert!(
        e.to_string().contains("checkpoint.grace_s") && e.to_string().contains("600"),
        "{e}"
    );
}

#[test]
fn the_same_client_token_returns_the_first_job() {
    let mut st = cluster();
    let mut spec = JobSpec::new("j", "q", "a", "alice", "h100", 1, 1);
    spec.client_token = Some("tok-1".into());
    let first = ok(&mut st, Command::Submit(spec.clone()), 1);
    let again = ok(&mut st, Command::Submit(spec.clone()), 2);
    let Outcome::Submitted {
        job,
        existing: false,
    } = first
    else {
        panic!("{first:?}")
    };
    assert_eq!(
        again,
        Outcome::Submitted {
            job,
            existing: true
        }
    );
    assert_eq!(st.jobs.len(), 1);
    // Another user's identical token is a different job.
    spec.user = "bob".into();
    let Outcome::Submitted {
        job: other,
        existing: false,
    } = ok(&mut st, Command::Submit(spec), 3)
    else {
        panic!()
    };
    assert_ne!(other, job);
}
