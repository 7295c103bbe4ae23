//! `tranche bench soak`: a year of jobs through a real controller trio (fsync'd
//! storage, QUIC with mutual TLS), to show that what the controllers hold stays flat
//! while ended jobs move to the history store.
//!
//! The retention clock is driven fast: every controller gets `[retention] job_hot_s =
//! --hot-s` and `check_s = 1`, so `--hot-s` seconds stand for a day. Retention itself
//! runs as in production: the leader proposes `ForgetEnded`, every controller writes the
//! jobs it drops to its `history.redb`.
//!
//! Jobs end at once and cost no process: this process plays the agents of `--nodes`
//! simulated nodes (each with its own agent certificate), as `tranche-agent` does over
//! the client API: it registers the node's fake GPUs, heartbeats, long-polls the node's
//! work (`Query::NodeWork`) and reports each attempt placed there as exited with code 0
//! (`JobProgress`, one write per job; a real agent also reports it RUNNING first).
//! Clients submit arrays of `--array` tasks, keeping at most `--backlog` jobs waiting.
//!
//! Every `--report-every` ended jobs it records each controller's resident memory, the
//! jobs in the replicated state, the size of the latest state image, the time for a
//! fresh fourth controller to install a snapshot and catch up (it is then removed and
//! its data dir deleted), the size of each `history.redb`, the first page of the
//! history of the last simulated day, `show` of the first job (ended longest ago) and
//! the submits' latency over the interval.

use std::collections::HashSet;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use tranche_client::Client;
use tranche_local::{demo, wait_until, LocalCluster};
use tranche_model::{ArraySpec, JobId, JobRef, JobSpec, JobStatus, NodeName};
use tranche_proto::{
    ClientCommand, ClientRequest, HistoryFilter, JobFilter, MembershipChange, Query, Response,
};
use tranche_state::Progress;
use tranche_tls::Role;

use super::cluster::{create_cluster, prepare_one_share};
use super::stats::{print_json, Spread};
use super::tenants::{pids, rss_mib};
use crate::now_ms;

#[derive(clap::Args, Debug)]
pub struct SoakArgs {
    /// Jobs pushed through (each array task is a job).
    #[arg(long, default_value_t = 100_000)]
    jobs: u64,
    /// A report every this many ended jobs.
    #[arg(long, default_value_t = 100_000)]
    report_every: u64,
    /// Seconds that stand for a day: every controller's `[retention] job_hot_s`.
    #[arg(long, default_value_t = 30)]
    hot_s: u64,
    /// Tasks in each submitted array.
    #[arg(long, default_value_t = 500)]
    array: u32,
    /// Concurrent submitting clients, each on its own connection.
    #[arg(long, default_value_t = 8)]
    clients: usize,
    /// At most this many jobs submitted and not yet ended: the queue stays full but
    /// bounded.
    #[arg(long, default_value_t = 20_000)]
    backlog: u64,
    /// Simulated nodes, whose agents this process plays.
    #[arg(long, default_value_t = 16)]
    nodes: usize,
    /// Fake GPUs per node.
    #[arg(long, default_value_t = 32)]
    gpus: u32,
    /// Where the controllers' data dirs go (default: a temporary dir on this disk).
    #[arg(long)]
    dir: Option<PathBuf>,
    /// One JSON object per report, then one for the summary.
    #[arg(long)]
    json: bool,
}

impl SoakArgs {
    fn check(&self) -> Result<(), String> {
        for (flag, v) in [
            ("--jobs", self.jobs),
            ("--report-every", self.report_every),
            ("--hot-s", self.hot_s),
            ("--array", u64::from(self.array)),
            ("--clients", self.clients as u64),
            ("--backlog", self.backlog),
            ("--nodes", self.nodes as u64),
            ("--gpus", u64::from(self.gpus)),
        ] {
            if v == 0 {
                return Err(format!("{flag} must be at least 1"));
            }
        }
        if self.array > tranche_model::MAX_ARRAY_TASKS {
            return Err(format!(
                "--array {} is more than the {} tasks an array may have",
                self.array,
                tranche_model::MAX_ARRAY_TASKS
            ));
        }
        Ok(())
    }
}

/// What the load's tasks count, shared with the reports.
#[derive(Default)]
struct Load {
    /// Jobs submitted (acknowledged or in flight).
    submitted: AtomicU64,
    /// Jobs whose exit a simulated agent reported and the controllers applied.
    ended: AtomicU64,
    /// Submit latencies (ms) since the last report.
    submit_ms: Mutex<Vec<f64>>,
    /// Submits refused or failed and retried.
    submit_retries: AtomicU64,
    /// Exit reports refused or failed (each is sent again).
    report_retries: AtomicU64,
    /// The first array submitted: the job ended longest ago.
    first: OnceLock<JobId>,
    /// Why the load stopped early.
    failed: OnceLock<String>,
    stop: AtomicBool,
}

/// One report's figures.
struct Figures {
    jobs_ended: u64,
    elapsed_s: f64,
    jobs_per_s: f64,
    rss_mib: Vec<f64>,
    hot_jobs: f64,
    hot_ended_jobs: f64,
    image_bytes: f64,
    install_s: f64,
    history_bytes: Vec<u64>,
    raft_bytes: Vec<u64>,
    /// The leader's position (1-based, as c1, c2, c3) when the figures were read.
    leader: usize,
    history_ms: f64,
    history_page: usize,
    show_oldest_ms: f64,
    submits: usize,
    submit: Spread,
}

pub async fn soak(args: &SoakArgs) -> Result<(), String> {
    args.check()?;
    let extra = format!("[retention]\njob_hot_s = {}\ncheck_s = 1\n", args.hot_s);
    let (_keep, mut c) = create_cluster(3, &args.dir, &extra)?;
    // Each founding controller serves its metrics on a port of its own.
    let mut metrics = Vec::new();
    for i in 0..c.controllers.len() {
        let addr = c.reserve_tcp()?;
        c.prepend_config(i, &format!("metrics_addr = \"{addr}\""))?;
        metrics.push(addr);
    }
    c.start_all()?;
    let (admin, leader) = prepare_one_share(&mut c, "soak", args.nodes as u32 * args.gpus).await?;

    let load = Arc::new(Load::default());
    let mut tasks = Vec::new();
    for i in 0..args.nodes {
        let name = format!("soak-{i:03}");
        let client = c.client(Role::Agent, &name)?;
        client.prefer(leader);
        tasks.push(tokio::spawn(agent(
            Arc::new(client),
            name.as_str().into(),
            args.gpus,
            load.clone(),
        )));
    }
    for k in 0..args.clients {
        let client = c.client(Role::Admin, "admin")?;
        client.prefer(leader);
        tasks.push(tokio::spawn(submitter(
            Arc::new(client),
            format!("u{}", k % 4),
            args.jobs,
            args.array,
            args.backlog,
            load.clone(),
        )));
    }
    let day = Duration::from_secs(args.hot_s);
    if !args.json {
        println!(
            "soak: {} jobs through 3 controllers (fsync), {} simulated nodes × {} GPUs played by \
             this process; jobs end at once (their agent reports them exited, code 0)",
            args.jobs, args.nodes, args.gpus
        );
        println!(
            "the retention clock runs fast: {} s stand for a day ([retention] job_hot_s = {}, \
             check_s = 1); arrays of {} tasks from {} clients; * marks the leader",
            args.hot_s, args.hot_s, args.array, args.clients
        );
        println!(
            "{:>9} {:>7} {:>5} {:>6} {:>9} {:>17} {:>8} {:>8} {:>9} {:>8} {:>7} {:>13}",
            "jobs",
            "time",
            "days",
            "jobs/s",
            "hot jobs",
            "RSS MiB c1/c2/c3*",
            "image",
            "install",
            "history",
            "hist 1d",
            "show",
            "submit p50/99"
        );
    }

    let t0 = Instant::now();
    let mut next = args.report_every.min(args.jobs);
    let mut last = (Instant::now(), 0u64);
    let mut joiner_id = 4;
    let mut reports: Vec<Figures> = Vec::new();
    let mut progress = (Instant::now(), 0u64);
    let result = loop {
        tokio::time::sleep(Duration::from_millis(200)).await;
        if let Some(e) = load.failed.get() {
            break Err(e.clone());
        }
        let mut ended = load.ended.load(Ordering::Relaxed);
        if ended != progress.1 {
            progress = (Instant::now(), ended);
        } else if progress.0.elapsed() > Duration::from_secs(10)
            && load.submitted.load(Ordering::Relaxed) >= args.jobs
        {
            // An exit applied after its report was given up on is not counted: the
            // controllers' own count ends the run.
            if let Ok((0, _)) = not_ended(&admin).await {
                ended = args.jobs;
                load.ended.store(ended, Ordering::Relaxed);
            }
        }
        if progress.0.elapsed() > Duration::from_secs(120) {
            let held = match not_ended(&admin).await {
                Ok((_, text)) | Err(text) => text,
            };
            break Err(format!(
                "no job ended for 120 s ({ended} of {} ended, {} submitted; {held})",
                args.jobs,
                load.submitted.load(Ordering::Relaxed),
            ));
        }
        if ended < next {
            continue;
        }
        let f = measure(&mut c, &admin, &metrics, &load, day, &mut joiner_id).await;
        let mut f = match f {
            Ok(f) => f,
            Err(e) => break Err(e),
        };
        f.elapsed_s = t0.elapsed().as_secs_f64();
        f.jobs_per_s = (f.jobs_ended - last.1) as f64 / last.0.elapsed().as_secs_f64();
        last = (Instant::now(), f.jobs_ended);
        print_report(args, &f);
        reports.push(f);
        if ended >= args.jobs {
            break Ok(());
        }
        next = (ended / args.report_every + 1) * args.report_every;
        next = next.min(args.jobs);
    };
    load.stop.store(true, Ordering::Relaxed);
    for t in tasks {
        t.abort();
    }
    result?;
    print_summary(args, &load, &reports, t0.elapsed());
    Ok(())
}

/// One simulated agent: registers its node, heartbeats, and reports every attempt
/// placed on it as exited with code 0.
async fn agent(client: Arc<Client>, node: NodeName, gpus: u32, load: Arc<Load>) {
    let inv = demo::node(node.as_str(), gpus);
    while !matches!(
        client
            .command(ClientCommand::RegisterNode(inv.clone()))
            .await,
        Ok(Ok(_))
    ) {
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let (c, n) = (client.clone(), node.clone());
    let l = load.clone();
    tokio::spawn(async move {
        while !l.stop.load(Ordering::Relaxed) {
            let _ = c.heartbeat(n.clone()).await;
            tokio::time::sleep(Duration::from_secs(2)).await;
        }
    });
    // Attempts reported (or being reported) that the node's work still lists.
    let reported: Arc<Mutex<HashSet<(JobId, u32)>>> = Arc::default();
    let mut after = None;
    while !load.stop.load(Ordering::Relaxed) {
        let query = Query::NodeWork {
            node: node.clone(),
            after,
            wait_ms: 10_000,
        };
        let work = match client.read(query, true).await {
            Ok(Response::NodeWork(w)) => w,
            _ => {
                after = None;
                tokio::time::sleep(Duration::from_millis(200)).await;
                continue;
            }
        };
        after = Some(work.applied);
        let listed: HashSet<(JobId, u32)> = work.items.iter().map(|i| (i.job, i.attempt)).collect();
        let mut fresh = Vec::new();
        {
            let mut r = reported.lock().unwrap();
            r.retain(|k| listed.contains(k));
            for k in listed {
                if r.insert(k) {
                    fresh.push(k);
                }
            }
        }
        for (job, attempt) in fresh {
            let (c, l, r) = (client.clone(), load.clone(), reported.clone());
            tokio::spawn(async move {
                if report_exit(&c, job, attempt).await {
                    l.ended.fetch_add(1, Ordering::Relaxed);
                } else {
                    // Sent again once the node's work is next listed.
                    l.report_retries.fetch_add(1, Ordering::Relaxed);
                    r.lock().unwrap().remove(&(job, attempt));
                }
            });
        }
    }
}

/// Reports an attempt exited with code 0; whether the controllers applied it.
async fn report_exit(c: &Client, job: JobId, attempt: u32) -> bool {
    let event = Progress::Exited {
        code: Some(0),
        reason: None,
    };
    match c
        .command(ClientCommand::JobProgress {
            job,
            attempt,
            event,
        })
        .await
    {
        Ok(Ok(_)) => true,
        // Refused, or unanswered (a change of leader, a write not committed in time,
        // which may commit later): the job tells whether it took effect.
        _ => match c.read(Query::Job(JobRef::job(job)), false).await {
            Ok(Response::Job(j)) => {
                j.status.is_terminal() && j.attempts.last().map(|a| a.number) == Some(attempt)
            }
            _ => false,
        },
    }
}

/// One submitting client: arrays of `array` tasks (fewer for the last), while fewer
/// than `backlog` jobs wait, until `jobs` have been submitted.
async fn submitter(
    client: Arc<Client>,
    user: String,
    jobs: u64,
    array: u32,
    backlog: u64,
    load: Arc<Load>,
) {
    let mut k = 0u64;
    while !load.stop.load(Ordering::Relaxed) {
        let waiting = load
            .submitted
            .load(Ordering::Relaxed)
            .saturating_sub(load.ended.load(Ordering::Relaxed));
        if waiting >= backlog {
            tokio::time::sleep(Duration::from_millis(20)).await;
            continue;
        }
        let prior = load.submitted.load(Ordering::Relaxed);
        if prior >= jobs {
            return;
        }
        let n = (jobs - prior).min(u64::from(array));
        if load
            .submitted
            .compare_exchange(prior, prior + n, Ordering::Relaxed, Ordering::Relaxed)
            .is_err()
        {
            continue;
        }
        k += 1;
        let mut spec = JobSpec::new("soak", "q", "soak", &user, "h100", 1, 1);
        spec.command = vec!["true".into()];
        spec.array = Some(ArraySpec::parse(&format!("0-{}", n - 1)).expect("a valid range"));
        // One token for every try: a retried submit is applied once.
        spec.client_token = Some(format!("{user}-{}-{k}", tranche_client::new_token()));
        let t = Instant::now();
        let mut tries = 0;
        loop {
            match client.submit(spec.clone()).await {
                Ok((id, _)) => {
                    let _ = load.first.set(id);
                    load.submit_ms
                        .lock()
                        .unwrap()
                        .push(t.elapsed().as_secs_f64() * 1e3);
                    break;
                }
                Err(e) => {
                    tries += 1;
                    load.submit_retries.fetch_add(1, Ordering::Relaxed);
                    if tries >= 20 {
                        let _ = load
                            .failed
                            .set(format!("a submit failed {tries} times, last: {e}"));
                        return;
                    }
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            }
        }
    }
}

/// How many jobs the controllers hold that have not ended, and a few of them, for a
/// stalled run's message.
async fn not_ended(admin: &Client) -> Result<(usize, String), String> {
    let filter = JobFilter {
        status: JobStatus::ALL
            .into_iter()
            .filter(|s| !s.is_terminal())
            .collect(),
        ..JobFilter::default()
    };
    match admin.read(Query::Jobs(filter), false).await {
        Ok(Response::Jobs(jobs)) => {
            let live: Vec<String> = jobs
                .iter()
                .map(|j| format!("{} {}", j.id, j.status))
                .collect();
            let text = format!(
                "the controllers hold {} jobs not ended{}{}",
                live.len(),
                if live.is_empty() { "" } else { ", e.g. " },
                live.iter().take(5).cloned().collect::<Vec<_>>().join(", ")
            );
            Ok((live.len(), text))
        }
        Ok(other) => Err(format!("the job list answered {}", other.kind())),
        Err(e) => Err(format!("the job list: {e}")),
    }
}

/// The value of an unlabelled gauge in a metrics text.
fn gauge(text: &str, name: &str) -> Option<f64> {
    text.lines().find_map(|l| {
        let (n, v) = l.split_once(' ')?;
        (n == name).then(|| v.trim().parse().ok()).flatten()
    })
}

/// `GET /metrics` of a controller's metrics address.
async fn scrape(addr: &str) -> Result<String, String> {
    let addr = addr.to_string();
    tokio::task::spawn_blocking(move || {
        use std::io::{Read, Write};
        let mut s = std::net::TcpStream::connect(&addr).map_err(|e| format!("{addr}: {e}"))?;
        s.set_read_timeout(Some(Duration::from_secs(10)))
            .map_err(|e| e.to_string())?;
        s.write_all(b"GET /metrics HTTP/1.0\r\nHost: localhost\r\n\r\n")
            .map_err(|e| format!("{addr}: {e}"))?;
        let mut out = String::new();
        s.read_to_string(&mut out)
            .map_err(|e| format!("{addr}: {e}"))?;
        Ok(out)
    })
    .await
    .map_err(|e| e.to_string())?
}

/// Makes a membership change, trying again while it is refused (a change of leader,
/// the previous change not yet applied); a try whose answer was lost but which took
/// effect counts.
async fn membership(admin: &Client, change: MembershipChange) -> Result<(), String> {
    let (id, adding) = match &change {
        MembershipChange::Add(m) => (m.id, true),
        MembershipChange::Remove { id } => (*id, false),
    };
    let what = if adding { "adding" } else { "removing" };
    let mut last = String::new();
    for tries in 0..40 {
        if tries > 0 {
            tokio::time::sleep(Duration::from_millis(250)).await;
            if let Ok(Response::Controllers(s)) = admin.read(Query::Controllers, false).await {
                if s.members.iter().any(|m| m.member.id == id && m.voter) == adding {
                    return Ok(());
                }
            }
        }
        match admin
            .request(&ClientRequest::Membership(change.clone()))
            .await
        {
            Ok(Response::Done) => return Ok(()),
            Ok(Response::Error(e)) => last = e.to_string(),
            Ok(other) => last = format!("answered {}", other.kind()),
            Err(e) => last = e.to_string(),
        }
    }
    Err(format!("{what} controller {id}: {last}"))
}

/// A fresh controller joins, installs a snapshot and catches up with the commit index
/// of the moment it was added; it is then removed and its files deleted. Returns the
/// seconds from the membership change to caught up.
async fn install_time(c: &mut LocalCluster, admin: &Client, id: u64) -> Result<f64, String> {
    let j = c.prepare_joiner(id)?;
    c.start(j)?;
    // A client that knows the new member's address too.
    let all = c.client(Role::Admin, "admin")?;
    let leader = c
        .wait_leader(admin, Duration::from_secs(15))
        .await
        .ok_or("no leader")?;
    let member = c.controllers[j].member.clone();
    let t = Instant::now();
    membership(admin, MembershipChange::Add(member)).await?;
    let target = c
        .status_of(&all, leader)
        .await
        .ok_or("the leader's status")?
        .commit;
    let caught_up = wait_until(
        "a new controller installed a snapshot and caught up",
        Duration::from_secs(300),
        async || match c.status_of(&all, j).await {
            Some(s) if s.applied >= target => Ok(()),
            Some(s) => Err(format!("applied {} of {target}", s.applied)),
            None => Err("no answer".into()),
        },
    )
    .await;
    let secs = t.elapsed().as_secs_f64();
    let removed = membership(admin, MembershipChange::Remove { id }).await;
    c.kill(j);
    let k = c.controllers.remove(j);
    let _ = std::fs::remove_dir_all(&k.data_dir);
    let _ = std::fs::remove_file(&k.config);
    let _ = std::fs::remove_file(&k.log);
    caught_up?;
    removed?;
    Ok(secs)
}

async fn measure(
    c: &mut LocalCluster,
    admin: &Client,
    metrics: &[String],
    load: &Load,
    day: Duration,
    joiner_id: &mut u64,
) -> Result<Figures, String> {
    let jobs_ended = load.ended.load(Ordering::Relaxed);
    let submit_ms = std::mem::take(&mut *load.submit_ms.lock().unwrap());
    // A fresh controller installs a snapshot first, so that every report's memory
    // includes what sending one costs (the first report's would otherwise be the only
    // one without it).
    let install_s = install_time(c, admin, *joiner_id).await?;
    *joiner_id += 1;
    let rss = pids(c)?
        .into_iter()
        .map(rss_mib)
        .collect::<Result<Vec<_>, _>>()?;
    let file_sizes = |name: &str| -> Vec<u64> {
        c.controllers
            .iter()
            .map(|k| {
                std::fs::metadata(k.data_dir.join(name))
                    .map(|m| m.len())
                    .unwrap_or(0)
            })
            .collect()
    };
    let history_bytes = file_sizes("history.redb");
    let raft_bytes = file_sizes("raft.redb");
    // The history of the last simulated day, first page, as `tranche jobs --history
    // --since 1d` asks it.
    let mut times = Vec::new();
    let mut page = 0;
    for _ in 0..3 {
        let since = now_ms().saturating_sub(day.as_millis() as u64);
        let t = Instant::now();
        let r = admin
            .read(
                Query::History(HistoryFilter {
                    since: Some(since),
                    ..HistoryFilter::default()
                }),
                false,
            )
            .await;
        times.push(t.elapsed().as_secs_f64() * 1e3);
        match r {
            Ok(Response::History(p)) => page = p.jobs.len(),
            Ok(other) => return Err(format!("a history read answered {}", other.kind())),
            Err(e) => return Err(format!("a history read: {e}")),
        }
    }
    let history_ms = Spread::of(&times).p50;
    let first = *load.first.get().ok_or("no array submitted yet")?;
    let t = Instant::now();
    match admin.read(Query::Job(JobRef::job(first)), false).await {
        Ok(Response::Job(_)) => {}
        Ok(other) => return Err(format!("show {first} answered {}", other.kind())),
        Err(e) => return Err(format!("show {first}: {e}")),
    }
    let show_oldest_ms = t.elapsed().as_secs_f64() * 1e3;
    // The leader wrote a fresh image to send the new controller: read it now.
    let leader = c
        .wait_leader(admin, Duration::from_secs(15))
        .await
        .ok_or("no leader")?;
    let text = scrape(&metrics[leader]).await?;
    let read = |name: &str| gauge(&text, name).ok_or(format!("the metrics lack {name}"));
    Ok(Figures {
        jobs_ended,
        elapsed_s: 0.0,
        jobs_per_s: 0.0,
        rss_mib: rss,
        hot_jobs: read("tranche_state_jobs")?,
        hot_ended_jobs: read("tranche_state_ended_jobs")?,
        image_bytes: read("tranche_state_image_bytes")?,
        install_s,
        history_bytes,
        raft_bytes,
        leader: leader + 1,
        history_ms,
        history_page: page,
        show_oldest_ms,
        submits: submit_ms.len(),
        submit: Spread::of(&submit_ms),
    })
}

const MIB: f64 = 1024.0 * 1024.0;

fn print_report(args: &SoakArgs, f: &Figures) {
    let days = f.elapsed_s / args.hot_s as f64;
    if args.json {
        print_json(serde_json::json!({
            "bench": "soak",
            "jobs_ended": f.jobs_ended,
            "elapsed_s": f.elapsed_s,
            "simulated_days": days,
            "jobs_per_s": f.jobs_per_s,
            "rss_mib": f.rss_mib,
            "hot_jobs": f.hot_jobs,
            "hot_ended_jobs": f.hot_ended_jobs,
            "image_bytes": f.image_bytes,
            "install_s": f.install_s,
            "history_bytes": f.history_bytes,
            "raft_log_bytes": f.raft_bytes,
            "leader": format!("c{}", f.leader),
            "history_1d_first_page_ms": f.history_ms,
            "history_1d_first_page_jobs": f.history_page,
            "show_oldest_ms": f.show_oldest_ms,
            "submits": f.submits,
            "submit_ms_p50": f.submit.p50,
            "submit_ms_p99": f.submit.p99,
        }));
        return;
    }
    // The leader's marked with `*`.
    let rss: Vec<String> = f
        .rss_mib
        .iter()
        .enumerate()
        .map(|(i, r)| format!("{r:.0}{}", if i + 1 == f.leader { "*" } else { "" }))
        .collect();
    let history = f.history_bytes.iter().copied().max().unwrap_or(0) as f64 / MIB;
    println!(
        "{:>9} {:>6.0}s {:>5.1} {:>6.0} {:>9} {:>17} {:>6.1}Mi {:>7.2}s {:>7.1}Mi {:>6.1}ms {:>5.1}ms {:>6.0}/{:<6.0}",
        f.jobs_ended,
        f.elapsed_s,
        days,
        f.jobs_per_s,
        f.hot_jobs,
        rss.join("/"),
        f.image_bytes / MIB,
        f.install_s,
        history,
        f.history_ms,
        f.show_oldest_ms,
        f.submit.p50,
        f.submit.p99,
    );
}

/// Least and greatest of a figure over the reports after the first simulated day.
fn range(reports: &[&Figures], pick: impl Fn(&Figures) -> f64) -> (f64, f64) {
    reports
        .iter()
        .map(|f| pick(f))
        .fold((f64::MAX, 0.0), |(lo, hi), v| (lo.min(v), hi.max(v)))
}

fn print_summary(args: &SoakArgs, load: &Load, reports: &[Figures], took: Duration) {
    let secs = took.as_secs_f64();
    let ended = load.ended.load(Ordering::Relaxed);
    let days = secs / args.hot_s as f64;
    let after_day: Vec<&Figures> = reports
        .iter()
        .filter(|f| f.elapsed_s >= args.hot_s as f64)
        .collect();
    let rss = range(&after_day, |f| {
        f.rss_mib.iter().cloned().fold(0.0, f64::max)
    });
    let image = range(&after_day, |f| f.image_bytes / MIB);
    let install = range(&after_day, |f| f.install_s);
    let hot = range(&after_day, |f| f.hot_jobs);
    let p99 = range(&after_day, |f| f.submit.p99);
    let (sr, rr) = (
        load.submit_retries.load(Ordering::Relaxed),
        load.report_retries.load(Ordering::Relaxed),
    );
    if args.json {
        print_json(serde_json::json!({
            "bench": "soak",
            "summary": {
                "jobs": ended,
                "seconds": secs,
                "jobs_per_s": ended as f64 / secs,
                "simulated_days": days,
                "jobs_per_simulated_day": ended as f64 / days,
                "hot_s": args.hot_s,
                "reports_after_first_day": after_day.len(),
                "max_rss_mib_range": [rss.0, rss.1],
                "image_mib_range": [image.0, image.1],
                "install_s_range": [install.0, install.1],
                "hot_jobs_range": [hot.0, hot.1],
                "submit_ms_p99_range": [p99.0, p99.1],
                "submit_retries": sr,
                "exit_report_retries": rr,
            }
        }));
        return;
    }
    println!(
        "{ended} jobs in {secs:.0} s ({:.0} jobs/s): {days:.1} simulated days of {:.0} jobs",
        ended as f64 / secs,
        ended as f64 / days
    );
    if after_day.is_empty() {
        println!("no report came after the first simulated day");
        return;
    }
    println!(
        "after the first day ({} reports): largest RSS {:.0}–{:.0} MiB, image {:.1}–{:.1} MiB, \
         install {:.2}–{:.2} s, hot jobs {:.0}–{:.0}, submit p99 {:.0}–{:.0} ms",
        after_day.len(),
        rss.0,
        rss.1,
        image.0,
        image.1,
        install.0,
        install.1,
        hot.0,
        hot.1,
        p99.0,
        p99.1
    );
    println!("{sr} submits and {rr} exit reports retried");
}

#[cfg(test)]
mod tests {
    use super::{gauge, SoakArgs};

    fn args() -> SoakArgs {
        SoakArgs {
            jobs: 1000,
            report_every: 100,
            hot_s: 10,
            array: 500,
            clients: 2,
            backlog: 1000,
            nodes: 2,
            gpus: 8,
            dir: None,
            json: false,
        }
    }

    #[test]
    fn bad_arguments_are_refused_naming_the_flag() {
        assert_eq!(args().check(), Ok(()));
        let zero = SoakArgs { hot_s: 0, ..args() };
        assert_eq!(zero.check(), Err("--hot-s must be at least 1".to_string()));
        let big = SoakArgs {
            array: 10_001,
            ..args()
        };
        let e = big.check().unwrap_err();
        assert!(e.contains("--array 10001") && e.contains("10000"), "{e}");
    }

    #[test]
    fn a_gauge_is_read_by_its_exact_name() {
        let text = "# HELP tranche_state_jobs x\n# TYPE tranche_state_jobs gauge\n\
                    tranche_state_jobs_more 7\ntranche_state_jobs 1234\n";
        assert_eq!(gauge(text, "tranche_state_jobs"), Some(1234.0));
        assert_eq!(gauge(text, "tranche_state_image_bytes"), None);
    }
}
