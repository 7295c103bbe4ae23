//! Each frozen format migrated to today's.

use super::*;
use crate::Command;

/// A RUNNABLE job as format 2 stored it.
fn v2_job() -> v2::Job {
    v2::Job {
        id: JobId(1),
        spec: v2::JobSpec {
            name: "j".into(),
            queue: "q".into(),
            share: "s".into(),
            user: "alice".into(),
            priority: 0,
            request: Request {
                unit: "h100".into(),
                gpus_per_node: 1,
                nodes: 1,
            },
            cpus_per_node: 0,
            memory_mb_per_node: 0,
            image: "host".into(),
            command: vec!["true".into()],
            env: BTreeMap::new(),
            time_limit_s: None,
            checkpoint: v7::Checkpoint {
                signal: "SIGTERM".into(),
                grace_s: None,
            },
            retry_attempts: 1,
            preemption_retries: None,
            client_token: None,
            tags: BTreeMap::new(),
        },
        status: JobStatus::Runnable,
        submitted_at: 5,
        attempts: vec![],
        transitions: vec![],
        stop: None,
        hold: None,
        pending_reason: None,
        preemptions: 0,
        failures: 0,
    }
}

#[test]
fn a_format_2_submit_becomes_todays_with_no_working_directory() {
    let spec = v2_job().spec;
    let c: v3::Command = v2::Command::Submit(spec).into();
    let c: Command = v5::Command::from(v4::Command::from(c)).into();
    match c {
        Command::Submit(s) => assert_eq!((s.cwd, s.user.as_str()), (None, "alice")),
        other => panic!("{other:?}"),
    }
    let c: v3::Command = v2::Command::NodeDown {
        node: "n1".into(),
        reason: "no heartbeat for 9 s".into(),
    }
    .into();
    let c: Command = v5::Command::from(v4::Command::from(c)).into();
    assert_eq!(
        c,
        Command::NodeDown {
            node: "n1".into(),
            reason: "no heartbeat for 9 s".into()
        }
    );
}

#[test]
fn a_format_3_command_names_its_job_as_a_plain_reference() {
    let c: v4::Command = v3::Command::Cancel {
        job: JobId(7),
        reason: "x".into(),
    }
    .into();
    let c: Command = v5::Command::from(c).into();
    assert_eq!(
        c,
        Command::Cancel {
            job: JobRef::job(JobId(7)),
            reason: "x".into()
        }
    );
    let v3: v3::Job = v2_job().into();
    let j: Job = v7::Job::from(v4::Job::from(v3)).into();
    assert_eq!((j.array, j.deps.len(), j.held), (None, 0, false));
    assert!(j.spec.dependency.is_empty() && j.spec.output.is_none());
}

/// A job submitted held, since released, with an output path, as format 4 stored
/// it (RUNNABLE).
fn v4_job() -> v4::Job {
    let v3: v3::Job = v2_job().into();
    let mut j: v4::Job = v3.into();
    j.spec.hold = true;
    j.spec.output = Some("o-%j.out".into());
    j
}

#[test]
fn a_format_4_submit_becomes_todays_with_no_sagemaker_part() {
    let c: Command = v5::Command::from(v4::Command::Submit(v4_job().spec)).into();
    match c {
        Command::Submit(s) => assert_eq!(
            (s.sagemaker, s.hold, s.output.as_deref(), s.user.as_str()),
            (None, true, Some("o-%j.out"), "alice")
        ),
        other => panic!("{other:?}"),
    }
    // Commands without a job spec are laid out alike in formats 4 and 5.
    for (old, today) in [
        (
            v4::Command::Hold {
                job: JobRef::job(JobId(4)),
            },
            Command::Hold {
                job: JobRef::job(JobId(4)),
            },
        ),
        (
            v4::Command::PruneLedger { before_hour: 3 },
            Command::PruneLedger { before_hour: 3 },
        ),
    ] {
        assert_eq!(codec::encode(&old), codec::encode(&today));
        assert_eq!(Command::from(v5::Command::from(old)), today);
    }
}

#[test]
fn a_format_4_state_migrates_with_no_access_keys_or_tags() {
    let mut ledger = v7::Ledger {
        since: 5,
        counted_to: 7_200_000,
        ..Default::default()
    };
    ledger
        .all_time
        .capacity
        .insert("h100".into(), 4 * 7_200_000);
    ledger.hours.insert(1, ledger.all_time.clone());
    let old = v4::State {
        version: 9,
        environments: BTreeMap::new(),
        policies: BTreeMap::new(),
        queues: BTreeMap::new(),
        shares: BTreeMap::new(),
        nodes: BTreeMap::new(),
        jobs: [(JobId(1), v4_job())].into(),
        tokens: BTreeMap::new(),
        next_job_id: 2,
        sessions: BTreeMap::new(),
        sessions_swept_at: 0,
        ledger: ledger.clone(),
    };
    let got = decode_state(4, &codec::encode(&old)).unwrap();
    assert_eq!((got.version, got.next_job_id), (9, 2));
    assert_eq!(got.ledger, ledger.into());
    assert!(got.keys.is_empty() && got.tags.is_empty());
    let j = &got.jobs[&JobId(1)];
    assert!(!j.held && j.spec.hold && j.spec.sagemaker.is_none());
    assert_eq!(j.spec.output.as_deref(), Some("o-%j.out"));
    assert!(
        got.runnable_in(&ShareName::from("s")).next().is_some(),
        "indexes rebuilt"
    );
    // Format 5's bytes are not format 4's: the state has its AWS part.
    assert!(decode_state(4, &got.snapshot()).is_err());
    assert_eq!(decode_state(codec::FORMAT, &got.snapshot()).unwrap(), got);
}

#[test]
fn a_format_5_state_migrates_with_capped_priorities_default_limits_and_no_sessions() {
    let share = v5::QuotaShare {
        name: "s".into(),
        queue: "q".into(),
        capacity_limits: vec![CapacityLimit {
            unit: "h100".into(),
            max: 4,
        }],
        resource_sharing: ResourceSharing {
            strategy: Strategy::Lend,
            borrow_limit: None,
        },
        in_share_preemption: true,
        state: ObjState::Enabled,
        members: vec!["alice".into()],
        default_grace_s: 30,
        max_grace_s: 600,
        min_runtime_s: 7,
    };
    let key = v5::AccessKey {
        id: "TKAAAAAAAAAAAAAAAAAA".into(),
        user: "alice".into(),
        role: KeyRole::User,
        created_at: 3,
        revoked_at: None,
    };
    let v4: v4::State = v3::State::from(v2::State {
        version: 1,
        environments: BTreeMap::new(),
        policies: BTreeMap::new(),
        queues: BTreeMap::new(),
        shares: BTreeMap::new(),
        nodes: BTreeMap::new(),
        jobs: [(JobId(1), v2_job())].into(),
        tokens: BTreeMap::new(),
        next_job_id: 2,
        sessions: BTreeMap::new(),
        sessions_swept_at: 0,
    })
    .into();
    let mut old: v5::State = v4.into();
    old.shares.insert("s".into(), share);
    old.aws.keys.insert(key.id.clone(), key);
    old.sessions.insert(9, Session::default());
    old.version = 12;
    let got = decode_state(5, &codec::encode(&old)).unwrap();
    assert_eq!((got.version, got.next_job_id), (12, 2));
    let s = &got.shares[&ShareName::from("s")];
    assert_eq!(
        (s.min_runtime_s, s.max_user_priority, s.limits),
        (7, DEFAULT_MAX_USER_PRIORITY, JobLimits::default())
    );
    s.validate().unwrap();
    let k = &got.keys["TKAAAAAAAAAAAAAAAAAA"];
    assert_eq!(
        (k.created_at, &k.issuer_serial, k.expires_at),
        (3, &None, None)
    );
    assert!(got.sessions.is_empty() && got.submit_rate.is_empty());
    assert_eq!(got.jobs[&JobId(1)].spec.user.as_str(), "alice");
    got.check_index().unwrap();
    // Format 6's bytes are not format 5's.
    assert!(decode_state(5, &got.snapshot()).is_err());
    assert_eq!(decode_state(codec::FORMAT, &got.snapshot()).unwrap(), got);
}

#[test]
fn a_format_1_state_migrates_with_its_nodes_and_jobs() {
    let mut st = State::new();
    let inv = NodeInventory {
        name: "n1".into(),
        address: "127.0.0.1".into(),
        labels: BTreeMap::new(),
        gpus: vec![],
        cpus: 1,
        memory_mb: 1,
    };
    st.apply(&Command::RegisterNode(inv.clone()), 5).unwrap();
    let n = st.nodes[&NodeName::from("n1")].clone();
    let old = v1::State {
        version: st.version,
        environments: st.environments.clone(),
        policies: st.policies.clone(),
        queues: st.queues.clone(),
        shares: BTreeMap::new(),
        nodes: [(
            n.inventory.name.clone(),
            v1::Node {
                inventory: n.inventory.clone(),
                allocated: n.allocated.clone(),
                drain: Some("repair".into()),
                down: None,
                unreachable: true,
                last_heartbeat: 1234,
                registered_at: n.registered_at,
            },
        )]
        .into(),
        jobs: BTreeMap::new(),
        tokens: st.tokens.clone(),
        next_job_id: st.next_job_id,
        sessions: BTreeMap::new(),
        sessions_swept_at: st.sessions_swept_at,
    };
    let got = decode_state(1, &codec::encode(&old)).unwrap();
    let m = &got.nodes[&NodeName::from("n1")];
    assert_eq!(m.drain.as_deref(), Some("repair"));
    assert!(m.unreachable);
    assert_eq!(m.inventory, inv);
    // Format 2: a job without a working directory gets none.
    let old2 = v2::State {
        version: 3,
        environments: BTreeMap::new(),
        policies: BTreeMap::new(),
        queues: BTreeMap::new(),
        shares: BTreeMap::new(),
        nodes: st.nodes.clone(),
        jobs: [(JobId(1), v2_job())].into(),
        tokens: BTreeMap::new(),
        next_job_id: 2,
        sessions: BTreeMap::new(),
        sessions_swept_at: 0,
    };
    let got = decode_state(2, &codec::encode(&old2)).unwrap();
    let j = &got.jobs[&JobId(1)];
    assert_eq!((j.spec.name.as_str(), j.spec.cwd.as_deref()), ("j", None));
    assert_eq!(j.spec.command, vec!["true".to_string()]);
    assert!(
        got.runnable_in(&ShareName::from("s")).next().is_some(),
        "indexes rebuilt"
    );
    // Today's bytes read as format 1 do not decode: the layouts differ.
    assert!(decode_state(1, &st.snapshot()).is_err());
    assert_eq!(decode_state(codec::FORMAT, &st.snapshot()).unwrap(), st);
    assert_eq!(
        decode_state(10, &st.snapshot()),
        Err(FormatError::Unknown { found: 10 })
    );
}

#[test]
fn a_format_7_state_migrates_with_no_checkpoints_and_aws_loan_terms() {
    let v3: v3::Job = v2_job().into();
    let job: v7::Job = v4::Job::from(v3).into();
    let attempt = v7::Attempt {
        number: 1,
        allocation: vec![],
        borrowed: true,
        scheduled_at: 10,
        started_at: Some(20),
        ended_at: Some(30),
        end: Some(AttemptEnd::Stopped {
            kind: StopKind::Cancel,
            code: None,
        }),
    };
    let share = v7::QuotaShare {
        name: "s".into(),
        queue: "q".into(),
        capacity_limits: vec![],
        resource_sharing: ResourceSharing {
            strategy: Strategy::LendAndBorrow,
            borrow_limit: None,
        },
        in_share_preemption: false,
        state: ObjState::Enabled,
        members: vec![],
        default_grace_s: 1,
        max_grace_s: 2,
        min_runtime_s: 30,
        max_user_priority: 7,
        limits: JobLimits::default(),
    };
    let lost = v7::Totals {
        lost_reclaim: 5_000,
        lost_drain: 1_000,
        ..Default::default()
    };
    let mut ledger = v7::Ledger::default();
    ledger
        .all_time
        .shares
        .insert(("s".into(), "h100".into()), lost);
    let old = v7::State {
        version: 3,
        environments: BTreeMap::new(),
        policies: BTreeMap::new(),
        queues: BTreeMap::new(),
        shares: [(ShareName::from("s"), share)].into(),
        nodes: BTreeMap::new(),
        jobs: v7::StoredJobs {
            specs: vec![job.spec.clone()],
            jobs: vec![v7::StoredJob {
                id: job.id,
                spec: 0,
                status: JobStatus::Cancelled,
                submitted_at: job.submitted_at,
                attempts: vec![attempt],
                transitions: vec![],
                stop: None,
                hold: None,
                pending_reason: None,
                preemptions: 0,
                failures: 0,
                array: None,
                deps: vec![],
                held: false,
            }],
        },
        tokens: BTreeMap::new(),
        next_job_id: 2,
        sessions: BTreeMap::new(),
        sessions_swept_at: 0,
        ledger,
        keys: BTreeMap::new(),
        tags: BTreeMap::new(),
        submit_rate: BTreeMap::new(),
    };
    for version in [6, 7] {
        let got = decode_state(version, &codec::encode(&old)).unwrap();
        let s = &got.shares[&ShareName::from("s")];
        assert_eq!((s.max_user_priority, s.loans), (7, LoanTerms::default()));
        assert_eq!(s.loan_min_runtime_s(), 30);
        let j = &got.jobs[&JobId(1)];
        assert_eq!(j.spec.checkpoint.every_s, None);
        assert_eq!(
            (j.attempts[0].started_at, j.attempts[0].checkpointed_at),
            (Some(20), None)
        );
        // Without checkpoints, every preempted GPU-millisecond was work lost.
        let t = got.ledger.all_time.shares[&("s".into(), "h100".into())];
        assert_eq!((t.lost(), t.work_lost), (6_000, 6_000));
    }
}
