//! The controller trio as real `tranched` processes on 127.0.0.1.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tranche_client::{Client, ClientError};
use tranche_local::rig::{self, http_get, rt, serial};
use tranche_local::{demo, wait_until, wait_until_blocking, LocalCluster};
use tranche_proto::{
    ApiError, ClientCommand, ClientRequest, JobFilter, MembershipChange, Query, Response,
    StateDigest,
};
use tranche_tls::Role;

/// The binary these tests run.
const TRANCHED: &str = env!("CARGO_BIN_EXE_tranched");

/// One controller, `extra` in its config, serving metrics on a port the cluster holds
/// for it; and that port.
fn one_with_metrics(extra: &str) -> (tempfile::TempDir, LocalCluster, u16) {
    let dir = tempfile::tempdir().unwrap();
    let mut c = LocalCluster::create(dir.path(), 1, rig::options(TRANCHED, extra)).unwrap();
    let addr = c.reserve_tcp().unwrap();
    c.prepend_config(0, &format!("metrics_addr = \"{addr}\""))
        .unwrap();
    c.start_all().unwrap();
    let port = addr.rsplit(':').next().unwrap().parse().unwrap();
    (dir, c, port)
}

/// An admin client, once a leader is elected and the demo policy is in place; and the
/// leader's position.
async fn ready(c: &mut LocalCluster) -> (Client, usize) {
    let (admin, leader) = rig::leader(c, Duration::from_secs(10)).await;
    setup(&admin).await;
    (admin, leader)
}

/// The demo policy, every share with the widest job limits.
async fn setup(admin: &Client) {
    // The load below submits faster than a user may by default.
    let widest = demo::objects().into_iter().map(|cmd| match cmd {
        ClientCommand::PutShare(s) => ClientCommand::PutShare(tranche_model::QuotaShare {
            limits: tranche_model::JobLimits::widest(),
            ..s
        }),
        c => c,
    });
    rig::apply(admin, widest).await;
}

async fn digest_of(c: &LocalCluster, admin: &Client, i: usize) -> Option<StateDigest> {
    let addr: std::net::SocketAddr = c.controllers[i].member.client_addr.parse().unwrap();
    let idx = admin.controllers().iter().position(|a| *a == addr)?;
    match admin
        .request_to(
            idx,
            &ClientRequest::Read {
                query: Query::Digest,
                stale: true,
            },
        )
        .await
    {
        Ok(Response::Digest(d)) => Some(d),
        _ => None,
    }
}

/// Waits until the given controllers have applied the same index and report the same
/// state digest there; returns it.
async fn converge(
    c: &LocalCluster,
    admin: &Client,
    which: &[usize],
    timeout: Duration,
) -> StateDigest {
    let agreed = wait_until("the same applied index and digest", timeout, async || {
        let mut ds = Vec::new();
        for &i in which {
            ds.push(digest_of(c, admin, i).await);
        }
        match ds.iter().cloned().collect::<Option<Vec<_>>>() {
            Some(d)
                if d.windows(2)
                    .all(|w| w[0].applied == w[1].applied && w[0].digest == w[1].digest) =>
            {
                Ok(d[0].clone())
            }
            _ => Err(format!("{ds:?}")),
        }
    })
    .await;
    agreed.unwrap_or_else(|e| {
        for &i in which {
            let log = std::fs::read_to_string(&c.controllers[i].log).unwrap_or_default();
            let tail: Vec<&str> = log.lines().rev().take(40).collect();
            eprintln!("--- log of controller {i} (last lines) ---");
            for l in tail.into_iter().rev() {
                eprintln!("{l}");
            }
        }
        panic!("controllers {which:?} did not converge: {e}");
    })
}

/// Waits until `acked` has counted at least `n` acknowledged submits.
async fn wait_acked(acked: &AtomicU64, n: u64, what: &str) {
    wait_until(what, Duration::from_secs(60), async || {
        let now = acked.load(Ordering::Relaxed);
        if now >= n {
            Ok(())
        } else {
            Err(format!("{now} of {n} acknowledged"))
        }
    })
    .await
    .unwrap_or_else(|e| panic!("{e}"));
}

/// Submits from `clients` concurrent tasks until `stop`, each submit with its own
/// token and retried until answered, counting acknowledgements in `count`. Returns
/// token → job id of every acknowledged submit.
fn submitters(
    admin: Arc<Client>,
    clients: usize,
    stop: Arc<AtomicBool>,
    count: Arc<AtomicU64>,
) -> Vec<tokio::task::JoinHandle<Vec<(String, u64)>>> {
    let seq = Arc::new(AtomicU64::new(0));
    (0..clients)
        .map(|_| {
            let admin = admin.clone();
            let stop = stop.clone();
            let seq = seq.clone();
            let count = count.clone();
            tokio::spawn(async move {
                let mut acked = Vec::new();
                while !stop.load(Ordering::Relaxed) {
                    let token = format!("t{}", seq.fetch_add(1, Ordering::Relaxed));
                    match admin.submit(demo::job("borrow", "carol", &token)).await {
                        Ok((id, _)) => acked.push((token, id.0)),
                        Err(e) => panic!("submit {token} not answered after retries: {e}"),
                    }
                    count.fetch_add(1, Ordering::Relaxed);
                }
                acked
            })
        })
        .collect()
}

async fn all_jobs(admin: &Client) -> Vec<tranche_proto::JobSummary> {
    match admin.read(Query::Jobs(JobFilter::default()), false).await {
        Ok(Response::Jobs(j)) => j,
        other => panic!("jobs: {other:?}"),
    }
}

#[test]
fn leader_elected_writes_anywhere_and_leader_kill_loses_nothing() {
    let _g = serial();
    let (_dir, mut c) = rig::cluster(TRANCHED, 3, "");
    rt().block_on(async {
        let admin = Arc::new(c.client(Role::Admin, "admin").unwrap());
        let leader = c
            .wait_leader(&admin, Duration::from_secs(10))
            .await
            .expect("a leader");
        // Writes through a follower are forwarded to the leader and applied everywhere.
        let follower = (leader + 1) % 3;
        let via_follower = c.client_of(follower, Role::Admin, "admin").unwrap();
        setup(&via_follower).await;
        let d = converge(&c, &admin, &[0, 1, 2], Duration::from_secs(10)).await;
        assert!(d.applied > 1);
        let objs = match admin.read(Query::Objects, false).await.unwrap() {
            Response::Objects(o) => o,
            other => panic!("{other:?}"),
        };
        assert_eq!(objs.shares.len(), 4);

        // Kill -9 the leader while 8 clients keep submitting: some submits are
        // acknowledged before the kill, and more once a new leader is elected.
        let stop = Arc::new(AtomicBool::new(false));
        let count = Arc::new(AtomicU64::new(0));
        let tasks = submitters(admin.clone(), 8, stop.clone(), count.clone());
        wait_acked(&count, 20, "submits before the kill").await;
        c.kill(leader);
        let killed_at = Instant::now();
        let new_leader = c
            .wait_leader(&admin, Duration::from_secs(30))
            .await
            .expect("a new leader");
        assert_ne!(new_leader, leader);
        let failover = killed_at.elapsed();
        let at_failover = count.load(Ordering::Relaxed);
        wait_acked(&count, at_failover + 20, "submits after the failover").await;
        stop.store(true, Ordering::Relaxed);
        let mut acked = Vec::new();
        for t in tasks {
            acked.extend(t.await.unwrap());
        }

        // Every acknowledged submit is there exactly once, with its token.
        let jobs = all_jobs(&admin).await;
        let mut ids: Vec<u64> = jobs.iter().map(|j| j.id.0).collect();
        ids.sort();
        let before = ids.len();
        ids.dedup();
        assert_eq!(before, ids.len(), "a job id appears twice");
        let tokens: BTreeMap<u64, Option<String>> = jobs
            .iter()
            .map(|j| (j.id.0, j.client_token.clone()))
            .collect();
        let mut by_token: BTreeMap<String, Vec<u64>> = BTreeMap::new();
        for (id, tok) in &tokens {
            by_token
                .entry(tok.clone().expect("every job has a token"))
                .or_default()
                .push(*id);
        }
        for (tok, id) in &acked {
            let found = by_token
                .get(tok)
                .unwrap_or_else(|| panic!("acknowledged submit {tok} (job {id}) lost"));
            assert_eq!(found, &vec![*id], "token {tok} maps to {found:?}");
        }
        assert!(
            by_token.values().all(|v| v.len() == 1),
            "a token made two jobs"
        );

        // The killed controller comes back and catches up.
        c.start(leader).unwrap();
        converge(&c, &admin, &[0, 1, 2], Duration::from_secs(20)).await;
        eprintln!(
            "acked {} submits; new leader seen {failover:?} after kill -9",
            acked.len()
        );
    });
}

#[test]
fn restart_from_data_dirs_reproduces_the_state() {
    let _g = serial();
    let (_dir, mut c) = rig::cluster(TRANCHED, 3, "");
    rt().block_on(async {
        let (admin, _) = ready(&mut c).await;
        for i in 0..40 {
            admin
                .submit(demo::job("lend", "dave", &format!("r{i}")))
                .await
                .unwrap();
        }
        let cancel = admin
            .command(ClientCommand::Cancel {
                job: tranche_model::JobId(3).into(),
                reason: "test".into(),
            })
            .await
            .unwrap();
        assert!(cancel.is_ok(), "{cancel:?}");
        // Once the scheduler has given every waiting job its reason (the cluster has
        // no nodes), its passes change nothing more: take the digest then.
        wait_until(
            "a reason for every waiting job",
            Duration::from_secs(30),
            async || {
                let not_yet = tranche_model::PendingReason::NotYetScheduled.render(0);
                let jobs = all_jobs(&admin).await;
                let bare: Vec<u64> = jobs
                    .iter()
                    .filter(|j| j.status == tranche_model::JobStatus::Runnable)
                    .filter(|j| j.reason.as_ref().is_none_or(|r| *r == not_yet))
                    .map(|j| j.id.0)
                    .collect();
                if bare.is_empty() && jobs.len() == 40 {
                    Ok(())
                } else {
                    Err(format!("{} jobs, without a reason: {bare:?}", jobs.len()))
                }
            },
        )
        .await
        .unwrap();
        let before = converge(&c, &admin, &[0, 1, 2], Duration::from_secs(10)).await;
        for i in 0..3 {
            assert_eq!(
                c.stop(i),
                Some(0),
                "controller {i} did not stop cleanly on SIGTERM"
            );
        }
        c.start_all().unwrap();
        c.wait_leader(&admin, Duration::from_secs(10))
            .await
            .expect("a leader after restart");
        let after = converge(&c, &admin, &[0, 1, 2], Duration::from_secs(10)).await;
        assert_eq!(before.digest, after.digest, "state differs after restart");
        assert_eq!(before.jobs, 40);
        assert!(after.applied >= before.applied);
    });
}

#[test]
fn a_member_down_during_compaction_catches_up_by_snapshot() {
    let _g = serial();
    let (_dir, mut c) = rig::cluster(
        TRANCHED,
        3,
        "[raft]\nsnapshot_entries = 50\nkeep_entries = 5\n",
    );
    rt().block_on(async {
        let (admin, leader) = ready(&mut c).await;
        let down = (leader + 1) % 3;
        c.kill(down);
        for i in 0..200 {
            admin
                .submit(demo::job("borrow", "erin", &format!("s{i}")))
                .await
                .unwrap();
        }
        let leader = c
            .wait_leader(&admin, Duration::from_secs(10))
            .await
            .unwrap();
        let st = c.status_of(&admin, leader).await.unwrap();
        assert!(st.image_index > 50, "no image written: {st:?}");
        assert!(st.first_index > 10, "log not compacted: {st:?}");
        c.start(down).unwrap();
        let d = converge(&c, &admin, &[0, 1, 2], Duration::from_secs(20)).await;
        assert_eq!(d.jobs, 200);
        let log = std::fs::read_to_string(&c.controllers[down].log).unwrap();
        assert!(
            log.contains("restored a snapshot from the leader"),
            "no snapshot install in its log"
        );
    });
}

#[test]
fn a_cut_off_minority_cannot_commit_and_all_converge_after_healing() {
    let _g = serial();
    let (_dir, mut c) = rig::cluster(TRANCHED, 3, "");
    rt().block_on(async {
        let (admin, leader) = ready(&mut c).await;
        let ids: Vec<u64> = c.controllers.iter().map(|x| x.member.id).collect();
        // Cut the leader off from both others.
        let cut = leader;
        for i in 0..3 {
            let from: Vec<u64> = if i == cut {
                ids.iter().copied().filter(|&x| x != ids[cut]).collect()
            } else {
                vec![ids[cut]]
            };
            let cl = c.client_of(i, Role::Admin, "admin").unwrap();
            assert_eq!(
                cl.request_to(0, &ClientRequest::Isolate { from })
                    .await
                    .unwrap(),
                Response::Done
            );
        }
        // The minority: a write there is never acknowledged.
        let mut minority = c.client_of(cut, Role::Admin, "admin").unwrap();
        minority.retry_for = Duration::from_secs(4);
        let r = minority
            .submit(demo::job("lend", "frank", "minority-1"))
            .await;
        assert!(
            matches!(r, Err(ClientError::Timeout(..))),
            "a write on the cut-off minority was answered: {r:?}"
        );
        // The majority elects a leader among itself and goes on.
        let maj: Vec<usize> = (0..3).filter(|&i| i != cut).collect();
        let majority = c.client_of(maj[0], Role::Admin, "admin").unwrap();
        for i in 0..10 {
            majority
                .submit(demo::job("lend", "frank", &format!("majority-{i}")))
                .await
                .unwrap();
        }
        // Heal.
        for i in 0..3 {
            let cl = c.client_of(i, Role::Admin, "admin").unwrap();
            cl.request_to(0, &ClientRequest::Isolate { from: vec![] })
                .await
                .unwrap();
        }
        let d = converge(&c, &admin, &[0, 1, 2], Duration::from_secs(20)).await;
        // The minority's write was never acknowledged; its client would retry it with
        // the same token. At most it exists once.
        let jobs = all_jobs(&admin).await;
        assert!(jobs.len() >= 10 && jobs.len() <= 11, "{} jobs", jobs.len());
        assert_eq!(d.jobs as usize, jobs.len());
    });
}

#[test]
fn add_a_fourth_member_and_remove_one_while_serving() {
    let _g = serial();
    let (_dir, mut c) = rig::cluster(TRANCHED, 3, "");
    rt().block_on(async {
        let admin = Arc::new(c.client(Role::Admin, "admin").unwrap());
        let leader = c
            .wait_leader(&admin, Duration::from_secs(10))
            .await
            .expect("a leader");
        setup(&admin).await;
        let stop = Arc::new(AtomicBool::new(false));
        let count = Arc::new(AtomicU64::new(0));
        let tasks = submitters(admin.clone(), 4, stop.clone(), count.clone());
        wait_acked(&count, 5, "submits before the changes").await;

        let j = c.prepare_joiner(4).unwrap();
        // A client that knows the new member's address too.
        let all = c.client(Role::Admin, "admin").unwrap();
        c.start(j).unwrap();
        let member = c.controllers[j].member.clone();
        let r = admin
            .request(&ClientRequest::Membership(MembershipChange::Add(member)))
            .await
            .unwrap();
        assert_eq!(r, Response::Done);
        // The new member catches up with what was committed when it was added, while
        // the submits go on.
        let added_at = c
            .status_of(&all, leader)
            .await
            .expect("leader status")
            .commit;
        wait_until(
            "the new member caught up",
            Duration::from_secs(30),
            async || match c.status_of(&all, j).await {
                Some(st) if st.applied >= added_at => Ok(()),
                other => Err(format!("{other:?}")),
            },
        )
        .await
        .unwrap();
        let n = count.load(Ordering::Relaxed);
        wait_acked(&count, n + 5, "submits after the addition").await;
        let victim = (leader + 1) % 3;
        let vid = c.controllers[victim].member.id;
        let r = admin
            .request(&ClientRequest::Membership(MembershipChange::Remove {
                id: vid,
            }))
            .await
            .unwrap();
        assert_eq!(r, Response::Done);
        let n = count.load(Ordering::Relaxed);
        wait_acked(&count, n + 5, "submits after the removal").await;
        stop.store(true, Ordering::Relaxed);
        let mut acked = 0;
        for t in tasks {
            acked += t.await.unwrap().len();
        }
        let rest: Vec<usize> = (0..4).filter(|&i| i != victim).collect();
        let admin = all;
        let d = converge(&c, &admin, &rest, Duration::from_secs(20)).await;
        assert!(d.jobs as usize >= acked);
        let st = c.status_of(&admin, j).await.unwrap();
        let voters: Vec<u64> = st
            .members
            .iter()
            .filter(|m| m.voter)
            .map(|m| m.member.id)
            .collect();
        assert!(
            voters.contains(&4) && !voters.contains(&vid),
            "voters {voters:?}"
        );
        // The removed controller stops by itself.
        wait_until(
            "the removed controller stops",
            Duration::from_secs(30),
            async || match c.is_running(victim) {
                false => Ok(()),
                true => Err("still running".into()),
            },
        )
        .await
        .unwrap();
    });
}

#[test]
fn malformed_frames_get_an_error_and_change_nothing() {
    let _g = serial();
    let (_dir, mut c) = rig::cluster(TRANCHED, 3, "");
    rt().block_on(async {
        let (admin, _) = ready(&mut c).await;
        let before = converge(&c, &admin, &[0, 1, 2], Duration::from_secs(10)).await;
        let good = tranche_proto::frame::encode(&ClientRequest::Write {
            request: None,
            command: ClientCommand::DeleteShare("lend".into()),
        });
        // A client of the previous protocol version is told to upgrade, in a frame of
        // its own version (which this client reports as an older controller's).
        let mut old_client = good.clone();
        old_client[5] = tranche_proto::frame::PREVIOUS_PROTOCOL_VERSION as u8;
        let hostile = c.client_of(0, Role::Admin, "admin").unwrap();
        match hostile.raw_to(0, &old_client).await {
            Err(ClientError::OlderController { said, .. }) => {
                assert!(said.contains("upgrade the client"), "{said}")
            }
            other => panic!("old client: {other:?}"),
        }
        let mut wrong_version = good.clone();
        wrong_version[4] = 0x7f;
        let mut oversize = good.clone();
        oversize[0..4].copy_from_slice(&(1u32 << 30).to_be_bytes());
        let truncated = good[..good.len() - 3].to_vec();
        let mut garbage = vec![0, 0, 0, 10, 0, tranche_proto::PROTOCOL_VERSION as u8];
        garbage.extend_from_slice(&[0xff; 8]);
        for (what, bytes) in [
            ("wrong version", wrong_version),
            ("over-size", oversize),
            ("truncated", truncated),
            ("garbage", garbage),
        ] {
            let hostile = c.client_of(0, Role::Admin, "admin").unwrap();
            match hostile.raw_to(0, &bytes).await {
                Ok(Response::Error(ApiError::BadRequest(m))) => eprintln!("{what}: {m}"),
                Err(ClientError::Closed { reason, .. }) => eprintln!("{what}: closed: {reason}"),
                other => panic!("{what}: {other:?}"),
            }
            // Others are still served.
            let r = admin.read(Query::Shares, false).await;
            assert!(
                matches!(r, Ok(Response::Shares(ref s)) if s.len() == 4),
                "{what}: {r:?}"
            );
        }
        let after = converge(&c, &admin, &[0, 1, 2], Duration::from_secs(10)).await;
        assert_eq!(before.digest, after.digest);
    });
}

/// Waits until the job has status `want`; every path ends by the deadline, also when
/// reads keep failing.
async fn wait_status(admin: &Client, job: tranche_model::JobId, want: tranche_model::JobStatus) {
    let r = wait_until(
        &format!("job {job} {want:?}"),
        Duration::from_secs(30),
        async || match admin.read(Query::Job(job.into()), false).await {
            Ok(Response::Job(j)) if j.status == want => Ok(()),
            Ok(Response::Job(j)) => Err(format!("{:?}: {:?}", j.status, j.pending_reason)),
            other => Err(format!("{other:?}")),
        },
    )
    .await;
    r.unwrap_or_else(|e| panic!("{e}"));
}

#[test]
fn the_leader_schedules_and_a_new_leader_carries_on() {
    let _g = serial();
    let (_dir, mut c) = rig::cluster(TRANCHED, 3, "");
    rt().block_on(async {
        let (admin, leader) = ready(&mut c).await;
        let agent = c.client(Role::Agent, "n1").unwrap();
        let r = agent
            .command(ClientCommand::RegisterNode(demo::node("n1", 2)))
            .await
            .unwrap();
        assert!(r.is_ok(), "{r:?}");
        let (a, _) = admin
            .submit(demo::job("reserve", "gina", "g1"))
            .await
            .unwrap();
        wait_status(&admin, a, tranche_model::JobStatus::Scheduled).await;
        // The plan came from the leader's scheduler and was committed everywhere.
        converge(&c, &admin, &[0, 1, 2], Duration::from_secs(10)).await;

        c.kill(leader);
        let admin = c.client(Role::Admin, "admin").unwrap();
        c.wait_leader(&admin, Duration::from_secs(10))
            .await
            .expect("a new leader");
        let (b, _) = admin
            .submit(demo::job("reserve", "gina", "g2"))
            .await
            .unwrap();
        wait_status(&admin, b, tranche_model::JobStatus::Scheduled).await;
        // Two GPUs, two jobs: a third waits with a reason naming the shortage.
        let (x, _) = admin
            .submit(demo::job("reserve", "gina", "g3"))
            .await
            .unwrap();
        wait_until(
            "a reason for the waiting job",
            Duration::from_secs(30),
            async || {
                let r = admin.read(Query::Job(x.into()), false).await;
                let Ok(Response::Job(j)) = r else {
                    return Err(format!("{r:?}"));
                };
                match &j.pending_reason {
                    Some(reason)
                        if !matches!(reason, tranche_model::PendingReason::NotYetScheduled) =>
                    {
                        assert_eq!(j.status, tranche_model::JobStatus::Runnable);
                        Ok(())
                    }
                    _ => Err(format!("{j:?}")),
                }
            },
        )
        .await
        .unwrap();
    });
}

async fn node_work(agent: &Client, node: &str, after: Option<u64>) -> tranche_proto::NodeWork {
    match agent
        .read(
            Query::NodeWork {
                node: node.into(),
                after,
                wait_ms: 2000,
            },
            true,
        )
        .await
    {
        Ok(Response::NodeWork(w)) => w,
        other => panic!("node work: {other:?}"),
    }
}

#[test]
fn an_agent_learns_its_work_and_reports_progress() {
    let _g = serial();
    let (_dir, mut c) = rig::cluster(TRANCHED, 3, "");
    rt().block_on(async {
        let (admin, _) = ready(&mut c).await;
        let agent = c.client(Role::Agent, "n1").unwrap();
        let w = node_work(&agent, "n1", None).await;
        assert!(!w.registered && w.items.is_empty());
        let r = agent
            .command(ClientCommand::RegisterNode(demo::node("n1", 4)))
            .await
            .unwrap();
        assert!(r.is_ok(), "{r:?}");
        // Another node's work is not this agent's to read.
        let other = agent
            .read(
                Query::NodeWork {
                    node: "n2".into(),
                    after: None,
                    wait_ms: 0,
                },
                true,
            )
            .await;
        assert!(
            matches!(other, Err(ClientError::Api(ApiError::Unauthorized(_)))),
            "{other:?}"
        );

        let mut spec = demo::job("reserve", "hana", "w1");
        spec.request.gpus_per_node = 2;
        spec.env.insert("EPOCHS".into(), "3".into());
        let (job, _) = admin.submit(spec).await.unwrap();
        // Long-poll until the placement shows up.
        let mut seen = 0;
        let item = wait_until(
            "the placement in the node's work",
            Duration::from_secs(30),
            async || {
                let w = node_work(&agent, "n1", Some(seen)).await;
                seen = w.applied;
                match w.items.iter().find(|i| i.job == job) {
                    Some(i) => Ok(i.clone()),
                    None => Err(format!("{:?}", w.items)),
                }
            },
        )
        .await
        .unwrap();
        assert_eq!(item.attempt, 1);
        assert_eq!(item.gpus.len(), 2);
        assert!(item
            .gpus
            .iter()
            .all(|b| b.uuid == format!("GPU-n1-{}", b.index.0)));
        assert_eq!(item.env.get("EPOCHS").map(String::as_str), Some("3"));
        assert!(item.stop.is_none());
        for event in [
            tranche_state::Progress::Starting,
            tranche_state::Progress::Running,
            tranche_state::Progress::Exited {
                code: Some(0),
                reason: None,
            },
        ] {
            let r = agent
                .command(ClientCommand::JobProgress {
                    job,
                    attempt: 1,
                    event,
                })
                .await
                .unwrap();
            assert!(r.is_ok(), "{r:?}");
        }
        wait_status(&admin, job, tranche_model::JobStatus::Succeeded).await;
        let w = node_work(&agent, "n1", None).await;
        assert!(w.items.is_empty(), "{:?}", w.items);
        // Progress for a job on another node is refused.
        let r = c
            .client(Role::Agent, "n9")
            .unwrap()
            .command(ClientCommand::JobProgress {
                job,
                attempt: 1,
                event: tranche_state::Progress::Running,
            })
            .await
            .unwrap();
        assert!(matches!(r, Err(ApiError::Unauthorized(_))), "{r:?}");
    });
}

#[test]
fn a_silent_agent_is_unreachable_then_down_and_its_jobs_requeue() {
    let _g = serial();
    let (_dir, mut c) = rig::cluster(
        TRANCHED,
        3,
        "[agents]\nunreachable_after_s = 1\ndown_after_s = 3\n",
    );
    rt().block_on(async {
        let (admin, _) = ready(&mut c).await;
        let agent = c.client(Role::Agent, "n1").unwrap();
        agent
            .command(ClientCommand::RegisterNode(demo::node("n1", 2)))
            .await
            .unwrap()
            .unwrap();
        let (job, _) = admin
            .submit(demo::job("reserve", "ines", "d1"))
            .await
            .unwrap();
        wait_status(&admin, job, tranche_model::JobStatus::Scheduled).await;
        // The agent goes silent.
        let mut was_unreachable = false;
        wait_until("the node DOWN", Duration::from_secs(30), async || {
            let nodes = match admin.read(Query::Nodes, false).await {
                Ok(Response::Nodes(n)) => n,
                other => return Err(format!("{other:?}")),
            };
            let n = &nodes[0];
            was_unreachable |= n.unreachable;
            match &n.down {
                Some(reason) => {
                    assert!(reason.contains("no heartbeat"), "{reason}");
                    Ok(())
                }
                None => Err(format!("{n:?}")),
            }
        })
        .await
        .unwrap();
        assert!(
            was_unreachable,
            "the node was never seen UNREACHABLE before DOWN"
        );
        let r = admin.read(Query::Job(job.into()), false).await.unwrap();
        let Response::Job(j) = r else { panic!("{r:?}") };
        assert!(
            !j.status.is_active(),
            "job still holds GPUs on a DOWN node: {:?}",
            j.status
        );
        // Heartbeats return (one before each look): the node comes back UP.
        wait_until("the node UP again", Duration::from_secs(30), async || {
            agent
                .heartbeat("n1".into())
                .await
                .map_err(|e| e.to_string())?;
            match admin.read(Query::Nodes, false).await {
                Ok(Response::Nodes(nodes)) if nodes[0].down.is_none() => Ok(()),
                other => Err(format!("{other:?}")),
            }
        })
        .await
        .unwrap();
    });
}

#[test]
fn metrics_are_served_for_prometheus() {
    let _g = serial();
    // One controller: metrics_addr is per controller, and one is a valid cluster.
    let (_dir, mut c, port) = one_with_metrics("");
    rt().block_on(async {
        let (admin, _) = ready(&mut c).await;
        admin.submit(demo::job("lend", "mia", "m1")).await.unwrap();
    });
    let get = |path: &str| http_get(port, path);
    let body = wait_until_blocking(
        "the waiting job in the metrics",
        Duration::from_secs(30),
        || {
            let t = get("/metrics");
            match t.contains("tranche_share_waiting_jobs{share=\"lend\"} 1") {
                true => Ok(t),
                false => Err(t),
            }
        },
    )
    .unwrap();
    assert!(
        body.starts_with("HTTP/1.") && body.contains(" 200 "),
        "{body}"
    );
    assert!(body.contains("tranche_raft_is_leader 1"), "{body}");
    assert!(
        body.contains("tranche_share_gpus_max{share=\"borrow\",unit=\"h100\"} 32"),
        "{body}"
    );
    assert!(
        body.contains("tranche_stops_total{kind=\"reclaim\"} 0"),
        "{body}"
    );
    assert!(get("/other").contains(" 404 "));
}

fn metric(text: &str, name: &str) -> f64 {
    text.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.parse().ok())
        .unwrap_or_else(|| panic!("no {name} in {text}"))
}

/// The busy cap on a running leader, from its counters. Passes are asked for every
/// millisecond (the Raft loop looks every 2 ms); only the cap (1%) spaces them. Every
/// pass starts at least 100 times the previous one's duration after the previous one
/// started, so all passes but the latest fit in 1% of the time since the controller
/// was started, however long a loaded machine makes them.
#[test]
fn the_busy_cap_bounds_the_leaders_time_in_passes() {
    let _g = serial();
    let started = Instant::now();
    let (_dir, mut c, port) = one_with_metrics(
        "[raft]\ntick_ms = 2\n[sched]\ninterval_ms = 1\nmin_gap_ms = 0\nmax_busy_percent = 1\n",
    );
    rt().block_on(async {
        let (admin, _) = ready(&mut c).await;
        // Work for every pass: 400 one-GPU jobs, of which the 20 one-GPU nodes take 20
        // (the others wait for room).
        for n in 0..20 {
            let name = format!("n{n}");
            let agent = c.client(Role::Agent, &name).unwrap();
            let r = agent
                .command(ClientCommand::RegisterNode(demo::node(&name, 1)))
                .await;
            assert!(matches!(r, Ok(Ok(_))), "{r:?}");
        }
        let admin = Arc::new(admin);
        let tasks: Vec<_> = (0..8)
            .map(|t| {
                let admin = admin.clone();
                tokio::spawn(async move {
                    for i in 0..50 {
                        let job = demo::job("lend", "noa", &format!("q{t}-{i}"));
                        admin.submit(job).await.unwrap();
                    }
                })
            })
            .collect();
        for t in tasks {
            t.await.unwrap();
        }
    });
    // Then 30 passes over that queue.
    let setup = metric(&http_get(port, "/metrics"), "tranche_sched_passes_total");
    let sample = wait_until_blocking("30 passes over the queue", Duration::from_secs(120), || {
        let t = http_get(port, "/metrics");
        match metric(&t, "tranche_sched_passes_total") {
            n if n >= setup + 30.0 => Ok(t),
            n => Err(format!("{n} passes")),
        }
    })
    .unwrap();
    let elapsed = started.elapsed().as_secs_f64();
    let busy = metric(&sample, "tranche_sched_busy_seconds_total");
    let latest = metric(&sample, "tranche_sched_pass_seconds");
    assert!(busy > 0.0 && latest > 0.0, "{sample}");
    assert!(
        (busy - latest) * 100.0 <= elapsed,
        "passes took {busy:.4} s (the latest {latest:.4} s) in {elapsed:.3} s"
    );
    eprintln!("passes took {busy:.4} s (the latest {latest:.4} s) in {elapsed:.3} s");
}

/// The benchmarks' `unsafe_no_fsync`: the controller says loudly that it is on, and
/// serves and restarts as usual (the writes reach the file, only never the platter).
#[test]
fn unsafe_no_fsync_warns_at_start_and_keeps_the_state_across_a_restart() {
    let _g = serial();
    let (_dir, mut c) = rig::cluster(TRANCHED, 1, "[raft]\nunsafe_no_fsync = true\n");
    rt().block_on(async {
        let (admin, _) = ready(&mut c).await;
        let (job, _) = admin.submit(demo::job("lend", "olga", "u1")).await.unwrap();
        let before = converge(&c, &admin, &[0], Duration::from_secs(30)).await;
        assert_eq!(c.stop(0), Some(0));
        c.start(0).unwrap();
        c.wait_leader(&admin, Duration::from_secs(30))
            .await
            .expect("a leader after the restart");
        let after = converge(&c, &admin, &[0], Duration::from_secs(30)).await;
        assert_eq!(after.jobs, before.jobs);
        let r = admin.read(Query::Job(job.into()), false).await;
        assert!(matches!(r, Ok(Response::Job(_))), "{r:?}");
    });
    let log = std::fs::read_to_string(&c.controllers[0].log).unwrap();
    assert_eq!(
        log.matches("UNSAFE: raft.unsafe_no_fsync = true").count(),
        2,
        "one warning per start: {log}"
    );
}

/// A local cluster holds its controllers' ports from the moment it picks them: while a
/// controller is down no other process can take its peer or client port, and it gets
/// them back when it restarts. (A port picked free, released and bound by the daemon
/// later could be taken in between by anything else on the machine.)
#[test]
fn a_controllers_ports_stay_its_own_while_it_is_down() {
    let _g = serial();
    let (_dir, mut c) = rig::cluster(TRANCHED, 1, "");
    rt().block_on(async {
        ready(&mut c).await;
    });
    c.kill(0);
    let m = c.controllers[0].member.clone();
    for addr in [&m.peer_addr, &m.client_addr] {
        assert!(
            std::net::UdpSocket::bind(addr.as_str()).is_err(),
            "{addr} was free while its controller was down"
        );
    }
    c.start(0).unwrap();
    rt().block_on(async {
        let admin = c.client(Role::Admin, "admin").unwrap();
        c.wait_leader(&admin, Duration::from_secs(20))
            .await
            .expect("the restarted controller leads again on its own ports");
    });
}
