//! Stored data across releases: a release reads the data dirs of the release before it
//! (checked in under `tests/fixtures/`), migrates them, and keeps every object and job
//! unchanged; a cluster on old data dirs is upgraded one controller at a time while a
//! client keeps writing; data of an unknown format version is refused by name.
//!
//! `write_fixture` (ignored) writes a new fixture with the code of the build it runs in:
//! each release that changes the stored format adds one and keeps the previous one's
//! test. Run it as
//! `TRANCHE_FIXTURE=format-N cargo test -p tranched --test upgrade -- --ignored`
//! after `cargo build` (it needs the `tranche-agent` binary).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::Value;
use tranche_client::Client;
use tranche_local::rig::{self, rt, serial};
use tranche_local::{demo, find_agent, wait_until, LocalCluster, LocalOptions};
use tranche_model::{JobId, JobSpec, JobStatus, Strategy};
use tranche_proto::ClientCommand;
use tranche_proto::{JobFilter, Query, Response};
use tranche_tls::Role;

/// The fixture's controllers listen on fixed ports below the ephemeral range (a data
/// dir records its members' addresses), so its tests run one at a time.
const FIXTURE_BASE_PORT: u16 = 29400;
/// Stands for the fixture's own directory in its configs.
const DIR_MARK: &str = "@FIXTURE_DIR@";

/// Liveness far off, so that a fixture restarted without its agents keeps its nodes
/// as they were; images every 20 entries, so that the fixture holds an image and log
/// entries after it.
const FIXTURE_CONFIG: &str =
    "[raft]\nsnapshot_entries = 20\nkeep_entries = 5\n\n[agents]\nunreachable_after_s = 3600\ndown_after_s = 7200\n";

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures")
}

fn options() -> LocalOptions {
    let mut opts = rig::options(env!("CARGO_BIN_EXE_tranched"), FIXTURE_CONFIG);
    opts.base_port = Some(FIXTURE_BASE_PORT);
    // The fixture's certificates must outlive the tests that read it (the CA is valid
    // about ten years).
    opts.cert_days = 3600;
    opts
}

async fn ok(admin: &Client, cmd: ClientCommand) {
    rig::apply(admin, [cmd]).await;
}

async fn job(admin: &Client, id: JobId) -> Value {
    match admin
        .read(Query::Job(id.into()), false)
        .await
        .expect("read answered")
    {
        Response::Job(j) => serde_json::to_value(&*j).unwrap(),
        other => panic!("job {id}: {other:?}"),
    }
}

async fn wait_status(admin: &Client, id: JobId, want: &str) {
    wait_until(
        &format!("job {id} {want}"),
        Duration::from_secs(60),
        async || {
            let j = job(admin, id).await;
            match j["status"].as_str() == Some(want) {
                true => Ok(()),
                false => Err(j["status"].to_string()),
            }
        },
    )
    .await
    .unwrap();
}

/// Everything a fixture promises to keep: the objects, every job in full, and each
/// node's name, inventory and drain.
async fn contents(admin: &Client) -> Value {
    let objects = match admin.read(Query::Objects, false).await.unwrap() {
        Response::Objects(o) => serde_json::to_value(&o).unwrap(),
        other => panic!("objects: {other:?}"),
    };
    let ids: Vec<JobId> = match admin
        .read(Query::Jobs(JobFilter::default()), false)
        .await
        .unwrap()
    {
        Response::Jobs(js) => js.iter().map(|j| j.id).collect(),
        other => panic!("jobs: {other:?}"),
    };
    let mut jobs = BTreeMap::new();
    for id in ids {
        jobs.insert(id.to_string(), job(admin, id).await);
    }
    let nodes = match admin.read(Query::Nodes, false).await.unwrap() {
        Response::Nodes(ns) => ns
            .iter()
            .map(|n| {
                let v = serde_json::to_value(n).unwrap();
                serde_json::json!({
                    "inventory": v["inventory"],
                    "drain": v["drain"],
                })
            })
            .collect::<Vec<_>>(),
        other => panic!("nodes: {other:?}"),
    };
    // Groups of shares (format 9); a release without them has none to show.
    let groups = match admin.read(Query::Groups, false).await.unwrap() {
        Response::Groups(g) => serde_json::to_value(&g).unwrap(),
        other => panic!("groups: {other:?}"),
    };
    serde_json::json!({ "objects": objects, "jobs": jobs, "nodes": nodes, "groups": groups })
}

/// `got` holds everything `want` holds, unchanged: every key of every object in `want`
/// is in `got` with an equal value (a newer release may add keys). Returns the path of
/// the first difference.
fn holds(want: &Value, got: &Value, path: &str) -> Result<(), String> {
    match (want, got) {
        (Value::Object(w), Value::Object(g)) => {
            for (k, wv) in w {
                let p = format!("{path}.{k}");
                match g.get(k) {
                    Some(gv) => holds(wv, gv, &p)?,
                    None => return Err(format!("{p}: missing")),
                }
            }
            Ok(())
        }
        (Value::Array(w), Value::Array(g)) => {
            if w.len() != g.len() {
                return Err(format!("{path}: {} items, expected {}", g.len(), w.len()));
            }
            for (i, (wv, gv)) in w.iter().zip(g).enumerate() {
                holds(wv, gv, &format!("{path}[{i}]"))?;
            }
            Ok(())
        }
        _ if want == got => Ok(()),
        _ => Err(format!("{path}: {got}, expected {want}")),
    }
}

fn copy_tree(from: &Path, to: &Path, keep: &dyn Fn(&Path) -> bool) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        let (src, dst) = (e.path(), to.join(e.file_name()));
        if !keep(&src) {
            continue;
        }
        if e.file_type().unwrap().is_dir() {
            copy_tree(&src, &dst, keep);
        } else {
            std::fs::copy(&src, &dst).unwrap();
            // A checkout does not keep a key's mode; the copy gets it back.
            if dst.extension().is_some_and(|x| x == "key") {
                use std::os::unix::fs::PermissionsExt;
                std::fs::set_permissions(&dst, std::fs::Permissions::from_mode(0o600)).unwrap();
            }
        }
    }
}

/// Rewrites `from`'s directory in every config under `dir` to `to`.
fn rebase_configs(dir: &Path, from: &str, to: &str) {
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.extension().is_some_and(|x| x == "toml") {
            let text = std::fs::read_to_string(&p).unwrap();
            std::fs::write(&p, text.replace(from, to)).unwrap();
        }
    }
}

/// A copy of fixture `name` in a new temporary dir, its configs pointing there.
fn fixture_copy(name: &str) -> (tempfile::TempDir, LocalCluster, Value) {
    let src = fixtures().join(name);
    assert!(src.is_dir(), "no fixture at {}", src.display());
    let tmp = tempfile::tempdir().unwrap();
    copy_tree(&src, tmp.path(), &|_| true);
    rebase_configs(tmp.path(), DIR_MARK, &tmp.path().display().to_string());
    let expected: Value =
        serde_json::from_str(&std::fs::read_to_string(src.join("expected.json")).unwrap()).unwrap();
    let cluster = LocalCluster::reopen(tmp.path(), 3, options()).unwrap();
    (tmp, cluster, expected)
}

#[test]
#[ignore = "writes a fixture of this build's stored format; run by hand (see the file's head)"]
fn write_fixture() {
    let name = std::env::var("TRANCHE_FIXTURE").expect("TRANCHE_FIXTURE=format-N");
    let out = fixtures().join(&name);
    assert!(!out.exists(), "{} exists already", out.display());
    let _serial = serial();
    let tmp = tempfile::tempdir().unwrap();
    let mut c = LocalCluster::create(tmp.path(), 3, options()).unwrap();
    c.start_all().unwrap();
    let agent = find_agent();
    let expected = rt().block_on(async {
        let (admin, _) = rig::leader(&mut c, Duration::from_secs(20)).await;
        // Environment `gpu` (4 H100), queue `q`; `vision` lends 2, `nlp` has 2 and
        // borrows without cap.
        for cmd in demo::base(vec![tranche_model::CapacityLimit {
            unit: "h100".into(),
            max: 4,
        }]) {
            ok(&admin, cmd).await;
        }
        // Format 8: a FAIR_SHARE policy (no queue uses it) and a share's weight.
        ok(
            &admin,
            ClientCommand::PutPolicy(tranche_model::SchedulingPolicy {
                name: "fair".into(),
                idle_resource_assignment: tranche_model::IdleAssignment::FairShare {
                    usage_half_life_s: 604_800,
                },
            }),
        )
        .await;
        // Format 6: `vision` has its own cap on users' priorities and job limits.
        let mut vision = demo::share("vision", Strategy::Lend, 2, &[]);
        vision.weight = Some(3);
        vision.max_user_priority = 20;
        vision.limits.max_jobs_per_user = 500;
        vision.limits.submits_per_user_per_minute = 100;
        ok(&admin, ClientCommand::PutShare(vision)).await;
        let mut nlp = demo::share("nlp", Strategy::LendAndBorrow, 2, &[]);
        nlp.resource_sharing.borrow_limit = Some(-1);
        nlp.default_grace_s = 1;
        // Format 8: loan terms.
        nlp.loans = tranche_model::LoanTerms {
            min_runtime_s: Some(0),
            recall_notice_s: 1,
        };
        ok(&admin, ClientCommand::PutShare(nlp)).await;
        // Format 9: a group of the two shares.
        ok(
            &admin,
            ClientCommand::PutGroup(tranche_model::ShareGroup {
                name: "research".into(),
                queue: "q".into(),
                shares: vec!["vision".into(), "nlp".into()],
                groups: vec![],
                capacity_limits: vec![tranche_model::CapacityLimit {
                    unit: "h100".into(),
                    max: 4,
                }],
                resource_sharing: tranche_model::ResourceSharing {
                    strategy: Strategy::LendAndBorrow,
                    borrow_limit: Some(-1),
                },
            }),
        )
        .await;
        for n in ["n1", "n2"] {
            c.add_agent(&agent, n, "2 x h100", "").unwrap();
        }
        wait_until("two nodes", Duration::from_secs(30), async || {
            match admin.read(Query::Nodes, false).await {
                Ok(Response::Nodes(ns)) if ns.len() == 2 => Ok(()),
                other => Err(format!("{other:?}")),
            }
        })
        .await
        .unwrap();
        let spec = |name: &str, share: &str, user: &str, gpus: u32, cmd: &str| {
            let mut s = JobSpec::new(name, "q", share, user, "h100", gpus, 1);
            s.command = vec!["sh".into(), "-c".into(), cmd.into()];
            s.client_token = Some(format!("fixture-{name}"));
            s.cwd = Some("/tmp".into());
            s
        };
        let submit = async |s: JobSpec| admin.submit(s).await.expect("submitted").0;
        let done = submit(spec("done", "nlp", "alice", 1, "echo done")).await;
        wait_status(&admin, done, "SUCCEEDED").await;
        let fails = submit(spec("fails", "nlp", "alice", 1, "exit 3")).await;
        wait_status(&admin, fails, "FAILED").await;
        // nlp fills all 4 GPUs (2 of them borrowed); vision's job takes its 2 back.
        // Format 8: a declared checkpoint interval, and a reported checkpoint.
        let mut long_a = spec("long-a", "nlp", "bob", 2, "sleep 600");
        long_a.checkpoint.every_s = Some(1800);
        let a = submit(long_a).await;
        let b = submit(spec(
            "long-b",
            "nlp",
            "bob",
            2,
            "sleep 2; touch \"$TRANCHE_CHECKPOINT_FILE\"; sleep 600",
        ))
        .await;
        wait_status(&admin, a, "RUNNING").await;
        wait_status(&admin, b, "RUNNING").await;
        wait_until("long-b's checkpoint", Duration::from_secs(30), async || {
            let j = job(&admin, b).await;
            match j["attempts"][0]["checkpointed_at"] {
                serde_json::Value::Null => Err(format!("{}", j["attempts"])),
                _ => Ok(()),
            }
        })
        .await
        .unwrap();
        let reclaim = submit(spec("reclaim", "vision", "carol", 2, "sleep 600")).await;
        wait_status(&admin, reclaim, "RUNNING").await;
        let waits = submit(spec("waits", "vision", "carol", 1, "sleep 600")).await;
        ok(
            &admin,
            ClientCommand::UpdatePriority {
                job: waits.into(),
                priority: 5,
            },
        )
        .await;
        // Format 4: an array of held tasks with a % limit, a job waiting on a
        // dependency, and output paths.
        let mut sweep = spec("sweep", "nlp", "alice", 1, "echo $TRANCHE_ARRAY_TASK_ID");
        sweep.array = Some(tranche_model::ArraySpec::parse("0-2%1").unwrap());
        sweep.hold = true;
        sweep.output = Some("sweep-%A_%a.out".into());
        submit(sweep).await;
        let mut after = spec("after", "vision", "carol", 1, "echo after");
        after.dependency = tranche_model::Dependency::parse(&format!("afterok:{waits}")).unwrap();
        after.error = Some("after-%j.err".into());
        let after = submit(after).await;
        wait_status(&admin, after, "PENDING").await;
        let gone = submit(spec("cancelled", "vision", "carol", 1, "sleep 600")).await;
        ok(
            &admin,
            ClientCommand::Cancel {
                job: gone.into(),
                reason: "not needed".into(),
            },
        )
        .await;
        // Format 5: a held job, and tags on share `vision`. (A job's SageMaker part is
        // set only by the AWS endpoint now; the format-5 and format-6 fixtures hold one.)
        let mut trains = spec("trains", "vision", "carol", 1, "echo train");
        trains.hold = true;
        let trains = submit(trains).await;
        wait_status(&admin, trains, "PENDING").await;
        ok(&admin, fixture_tags()).await;
        // Drained now, the nodes stop everything: the fixture holds no running job, so
        // that nothing changes when it is started again without its agents.
        for n in ["n1", "n2"] {
            ok(
                &admin,
                ClientCommand::DrainNode {
                    node: n.into(),
                    reason: "fixture".into(),
                    now: true,
                },
            )
            .await;
        }
        wait_until(
            "no job active",
            Duration::from_secs(60),
            async || match admin.read(Query::Jobs(JobFilter::default()), false).await {
                Ok(Response::Jobs(js)) if js.iter().all(|j| !j.status.is_active()) => Ok(()),
                other => Err(format!("{other:?}")),
            },
        )
        .await
        .unwrap();
        let all = contents(&admin).await;
        let preempted = all["jobs"]
            .as_object()
            .unwrap()
            .values()
            .filter(|j| j["preemptions"].as_u64() > Some(0))
            .count();
        assert!(preempted > 0, "no preempted job: {all}");
        let _ = JobStatus::Runnable;
        all
    });
    for i in 0..c.agents.len() {
        c.kill_agent(i);
    }
    for i in 0..3 {
        assert_eq!(c.stop(i), Some(0), "controller {i} stopped cleanly");
    }
    let keep = |p: &Path| {
        let name = p.file_name().unwrap().to_string_lossy().to_string();
        !(name.ends_with(".log") || name.starts_with("spool-") || name.starts_with("agent-"))
    };
    copy_tree(tmp.path(), &out, &keep);
    rebase_configs(&out, &tmp.path().display().to_string(), DIR_MARK);
    std::fs::write(
        out.join("expected.json"),
        serde_json::to_string_pretty(&expected).unwrap(),
    )
    .unwrap();
}

/// The tags the format-5 fixture puts on share `vision` (format 5 has no read of tags).
fn fixture_tags() -> ClientCommand {
    ClientCommand::TagResource {
        resource: "quota-share/vision".into(),
        tags: [("team".to_string(), "vision".to_string())].into(),
    }
}

/// Checks that the fixture's tag on share `vision` is kept: the object's tags are at
/// most 50, so 50 more keys are refused while its tag is there, and 49 are taken.
async fn fixture_tags_kept(admin: &Client) {
    let more = |n: usize| ClientCommand::TagResource {
        resource: "quota-share/vision".into(),
        tags: (0..n).map(|i| (format!("k{i}"), "v".to_string())).collect(),
    };
    let r = admin.command(more(50)).await.expect("write answered");
    assert!(
        format!("{r:?}").contains("at most 50 tags, got 51"),
        "the fixture's tag is lost: 50 more tags gave {r:?}"
    );
    ok(admin, more(49)).await;
}

/// Starts a fixture's controllers and waits for a leader; the admin client.
async fn start(c: &mut LocalCluster) -> Client {
    c.start_all().unwrap();
    rig::leader(c, Duration::from_secs(30)).await.0
}

/// Each fixture this build reads: the previous release's format, and its own.
fn read_unchanged(name: &str, format: u16) {
    read_unchanged_then(name, format, async |_| {});
}

/// [`read_unchanged`], then `then` with the admin client.
fn read_unchanged_then(name: &str, format: u16, then: impl AsyncFnOnce(&Client)) {
    let _serial = serial();
    let (_tmp, mut c, expected) = fixture_copy(name);
    let recorded = data_dir_format(&c.controllers[0].data_dir);
    assert_eq!(
        recorded,
        (format > 1).then_some(format),
        "{name} records its format"
    );
    rt().block_on(async {
        let admin = start(&mut c).await;
        let got = contents(&admin).await;
        holds(&expected, &got, "").unwrap_or_else(|e| panic!("{name} fixture: {e}"));
        assert!(expected["jobs"].as_object().unwrap().len() >= 6);
        then(&admin).await;
    });
}

#[test]
fn an_older_release_data_dirs_are_read_unchanged() {
    read_unchanged("format-1", 1);
}

#[test]
fn an_older_release_data_dirs_of_format_2_are_read_unchanged() {
    read_unchanged("format-2", 2);
}

#[test]
fn an_older_release_data_dirs_of_format_3_are_read_unchanged() {
    read_unchanged("format-3", 3);
}

#[test]
fn an_older_release_data_dirs_of_format_4_are_read_unchanged() {
    read_unchanged("format-4", 4);
}

#[test]
fn an_older_release_data_dirs_of_format_5_are_read_unchanged() {
    read_unchanged_then("format-5", 5, fixture_tags_kept);
}

#[test]
fn an_older_release_data_dirs_of_format_6_are_read_unchanged() {
    read_unchanged_then("format-6", 6, fixture_tags_kept);
}

#[test]
fn an_older_release_data_dirs_of_format_7_are_read_unchanged() {
    read_unchanged_then("format-7", 7, fixture_tags_kept);
}

#[test]
fn the_previous_release_data_dirs_are_read_unchanged() {
    read_unchanged_then("format-8", 8, fixture_tags_kept);
}

#[test]
fn this_release_data_dirs_are_read_unchanged() {
    read_unchanged_then("format-9", tranche_state::codec::FORMAT, fixture_tags_kept);
}

/// The previous release's data dirs, upgraded, with ended jobs kept one second: the
/// fixture's ended jobs (ended when it was written) leave the state for every
/// controller's history store, and read back unchanged from there, also after every
/// controller has restarted.
#[test]
fn after_an_upgrade_ended_jobs_leave_the_state_and_read_back_from_history() {
    let _serial = serial();
    let (tmp, mut c, expected) = fixture_copy("format-8");
    for ctl in &c.controllers {
        let mut text = std::fs::read_to_string(&ctl.config).unwrap();
        text += "\n[retention]\njob_hot_s = 1\ncheck_s = 1\n";
        std::fs::write(&ctl.config, text).unwrap();
    }
    let ended: Vec<(JobId, &Value)> = expected["jobs"]
        .as_object()
        .unwrap()
        .iter()
        .filter(|(_, j)| {
            ["SUCCEEDED", "FAILED", "CANCELLED"].contains(&j["status"].as_str().unwrap())
        })
        .map(|(id, j)| (JobId(id.parse().unwrap()), j))
        .collect();
    assert!(ended.len() >= 3, "the fixture has ended jobs: {ended:?}");
    rt().block_on(async {
        let admin = start(&mut c).await;
        wait_until(
            "the ended jobs leave the state",
            Duration::from_secs(30),
            async || match admin.read(Query::Jobs(JobFilter::default()), false).await {
                Ok(Response::Jobs(js)) if js.iter().all(|j| !j.status.is_terminal()) => Ok(()),
                other => Err(format!("{other:?}")),
            },
        )
        .await
        .unwrap();
        for (id, want) in &ended {
            holds(want, &job(&admin, *id).await, &format!("job {id}")).unwrap();
        }
        // Every controller wrote its own history, durably: after a restart of all,
        // each answers from its own store.
        for i in 0..3 {
            assert_eq!(c.stop(i), Some(0), "controller {i} stopped cleanly");
        }
        c.start_all().unwrap();
        c.wait_leader(&admin, Duration::from_secs(30))
            .await
            .expect("a leader");
        for i in 0..3 {
            let probe = c.client_of(i, Role::Admin, "admin").unwrap();
            let req = tranche_proto::ClientRequest::Read {
                query: Query::History(Default::default()),
                stale: true,
            };
            let page = match probe.request_to(0, &req).await.unwrap() {
                Response::History(p) => p,
                other => panic!("history of controller {i}: {other:?}"),
            };
            let mut got: Vec<JobId> = page
                .jobs
                .iter()
                .filter(|e| e.archived)
                .map(|e| e.job.id)
                .collect();
            got.sort();
            let mut want: Vec<JobId> = ended.iter().map(|(id, _)| *id).collect();
            want.sort();
            assert_eq!(got, want, "controller {i}'s history");
        }
        // A controller without those records (as one that caught up from a snapshot
        // taken after they were dropped): a client reading from it finds each job in
        // another controller's history. More entries than `snapshot_entries` first, so
        // that its state image is past the entry that dropped them and a restart does
        // not replay it.
        for _ in 0..30 {
            ok(&admin, fixture_tags()).await;
        }
        caught_up(&mut c, &admin, 2).await;
        assert_eq!(c.stop(2), Some(0), "controller 3 stopped cleanly");
        std::fs::remove_file(c.controllers[2].data_dir.join("history.redb")).unwrap();
        c.start(2).unwrap();
        let reader = c.client(Role::Admin, "admin").unwrap();
        reader.prefer(2);
        for (id, want) in &ended {
            let got = match reader.read(Query::Job((*id).into()), true).await {
                Ok(Response::Job(j)) => serde_json::to_value(&*j).unwrap(),
                other => panic!("job {id} through controller 3: {other:?}"),
            };
            holds(want, &got, &format!("job {id}")).unwrap();
        }
    });
    drop(tmp);
}

/// The stored format a data dir records, once its controller has opened it.
fn data_dir_format(dir: &Path) -> Option<u16> {
    let s = tranche_raftlog::DiskStorage::open(&dir.join("raft.redb")).unwrap();
    s.meta("format")
        .map(|v| u16::from_be_bytes(v.try_into().unwrap()))
}

/// Waits until controller `i` has applied everything the leader had committed when
/// asked.
async fn caught_up(c: &mut LocalCluster, admin: &Client, i: usize) {
    let leader = c
        .wait_leader(admin, Duration::from_secs(30))
        .await
        .expect("a leader");
    let commit = c
        .status_of(admin, leader)
        .await
        .expect("leader status")
        .commit;
    wait_until(
        &format!("controller {} caught up", i + 1),
        Duration::from_secs(30),
        async || match c.status_of(admin, i).await {
            Some(s) if s.applied >= commit => Ok(()),
            other => Err(format!("{other:?}")),
        },
    )
    .await
    .unwrap();
}

#[test]
fn a_cluster_on_the_previous_format_is_upgraded_one_controller_at_a_time_under_writes() {
    let _serial = serial();
    let (_tmp, mut c, expected) = fixture_copy("format-8");
    let dirs: Vec<PathBuf> = c.controllers.iter().map(|x| x.data_dir.clone()).collect();
    assert_eq!(
        data_dir_format(&dirs[0]),
        Some(8),
        "the previous release's data dir"
    );
    rt().block_on(async {
        // c2 and c3 start on this build (a majority); c1 still holds format-8 data.
        c.start(1).unwrap();
        c.start(2).unwrap();
        let admin = c.client(Role::Admin, "admin").unwrap();
        c.wait_leader(&admin, Duration::from_secs(30))
            .await
            .expect("a leader of c2 and c3");
        // A client keeps submitting; what it is told was accepted must survive.
        let writer = c.client(Role::Admin, "admin").unwrap();
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let stop2 = stop.clone();
        let submitter = tokio::spawn(async move {
            let mut acked = Vec::new();
            let mut n = 0;
            while !stop2.load(std::sync::atomic::Ordering::Relaxed) {
                n += 1;
                let mut spec = JobSpec::new(&format!("w{n}"), "q", "nlp", "dana", "h100", 1, 1);
                spec.client_token = Some(format!("upgrade-{n}"));
                if let Ok((id, _)) = writer.submit(spec).await {
                    acked.push((n, id));
                }
            }
            acked
        });
        // Then each controller in turn: c1 starts on its format-8 data dir while the
        // others serve; then c2 and c3 are restarted, one at a time.
        c.start(0).unwrap();
        caught_up(&mut c, &admin, 0).await;
        for i in [1, 2] {
            assert_eq!(c.stop(i), Some(0), "controller {} stopped cleanly", i + 1);
            tokio::time::sleep(Duration::from_millis(300)).await; // writes go on meanwhile
            c.start(i).unwrap();
            caught_up(&mut c, &admin, i).await;
        }
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        let acked = submitter.await.unwrap();
        assert!(
            acked.len() >= 10,
            "only {} submits acknowledged",
            acked.len()
        );
        // Every acknowledged submit is there, once; the fixture's contents unchanged.
        let got = contents(&admin).await;
        holds(&expected, &got, "").unwrap_or_else(|e| panic!("after the upgrade: {e}"));
        let jobs = got["jobs"].as_object().unwrap();
        for (n, id) in &acked {
            let j = &jobs[&id.to_string()];
            assert_eq!(j["spec"]["name"], format!("w{n}"), "job {id}");
        }
        // The writer's jobs (the fixture's own include an array's tasks, which share
        // their name).
        let fixture_jobs = expected["jobs"].as_object().unwrap();
        let written: Vec<&str> = jobs
            .iter()
            .filter(|(id, _)| !fixture_jobs.contains_key(*id))
            .map(|(_, j)| j["spec"]["name"].as_str().unwrap())
            .collect();
        let names: std::collections::BTreeSet<&str> = written.iter().copied().collect();
        assert_eq!(names.len(), written.len(), "a submit made two jobs");
    });
    for i in 0..3 {
        c.stop(i);
        assert_eq!(
            data_dir_format(&dirs[i]),
            Some(tranche_state::codec::FORMAT),
            "controller {} data dir",
            i + 1
        );
    }
}

#[test]
fn data_of_an_unknown_format_is_refused_by_name() {
    let _serial = serial();
    let (_tmp, mut c, _) = fixture_copy("format-1");
    // c1: its data dir says format 10. c2: its state image is sealed as format 10.
    {
        let s = tranche_raftlog::DiskStorage::open(&c.controllers[0].data_dir.join("raft.redb"))
            .unwrap();
        s.persist(&tranche_raftlog::PersistBatch {
            meta: &[("format", 10u16.to_be_bytes().to_vec())],
            ..Default::default()
        })
        .unwrap();
        let s = tranche_raftlog::DiskStorage::open(&c.controllers[1].data_dir.join("raft.redb"))
            .unwrap();
        let mut img = s.image().expect("the fixture holds an image");
        let mut data = tranche_state::codec::MAGIC.to_vec();
        data.extend(10u16.to_be_bytes());
        data.extend(&img.data);
        img.data = data;
        s.persist(&tranche_raftlog::PersistBatch {
            image: Some(img),
            ..Default::default()
        })
        .unwrap();
    }
    for i in [0, 1] {
        c.start(i).unwrap();
        let code = tranche_local::wait_until_blocking(
            "the controller to refuse its data dir",
            Duration::from_secs(30),
            || match c.controllers[i].child.as_mut().unwrap().try_wait() {
                Ok(Some(st)) => Ok(st.code()),
                other => Err(format!("{other:?}")),
            },
        )
        .unwrap();
        assert_ne!(
            code,
            Some(0),
            "controller {} started on unreadable data",
            i + 1
        );
        let log = std::fs::read_to_string(&c.controllers[i].log).unwrap();
        assert!(
            log.contains(
                "stored format version 10 is not readable by this build, which reads versions 1, 2, 3, 4, 5, 6, 7, 8 and 9"
            ),
            "controller {} log: {log}",
            i + 1
        );
        c.controllers[i].child = None;
    }
}
