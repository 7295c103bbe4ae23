//! `tranche bench scale`: many agents against the controller trio. One process
//! simulates `--nodes` agents over real QUIC with mutual TLS (each its own agent
//! certificate): each registers fake GPUs, heartbeats, and long-polls its node's work,
//! as `tranche-agent` does. The benchmark measures the cluster at rest (no jobs): Raft
//! entries per second, the leader's CPU, heartbeat answer times; then the time from a
//! placement's entry to its node's agent learning of it, one placement at a time.

use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tranche_client::Client;
use tranche_local::{demo, wait_until};

use tranche_model::{JobId, JobSpec, NodeName};
use tranche_proto::{ClientCommand, Query, Response};
use tranche_state::Progress;
use tranche_tls::{Role, TlsFiles};

use super::cluster::{prepare_one_share, ClusterDir};
use super::stats::{print_json, Spread};
use crate::now_ms;

#[derive(clap::Args)]
pub struct ScaleArgs {
    /// Simulated agents, one node each.
    #[arg(long, default_value_t = 1000)]
    nodes: usize,
    /// Fake GPUs per node.
    #[arg(long, default_value_t = 8)]
    gpus: u32,
    /// The agents' heartbeat interval, in milliseconds (the agent's default is 2000).
    #[arg(long, default_value_t = 2000)]
    heartbeat_ms: u64,
    /// Seconds measured at rest, once every node is registered.
    #[arg(long, default_value_t = 20)]
    rest: u64,
    /// Placements timed after the rest, one at a time.
    #[arg(long, default_value_t = 100)]
    placements: usize,
    #[command(flatten)]
    cluster: ClusterDir,
    #[arg(long)]
    json: bool,
}

/// Agents started together.
const WAVE: usize = 250;

/// What the simulated agents record.
#[derive(Default)]
struct Marks {
    /// Heartbeat round trips (ms) while measuring.
    heartbeats: Mutex<Vec<f64>>,
    heartbeat_errors: AtomicUsize,
    measuring: AtomicBool,
    /// Per placement: from its entry's time to its agent's answer (ms).
    notified: Mutex<Vec<(JobId, f64)>>,
    registered: AtomicUsize,
}

/// CPU seconds (user + system) a process has used so far, from `/proc/<pid>/stat`.
fn cpu_seconds(pid: u32) -> Option<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // Fields after the command name (which is in parentheses and may hold spaces).
    let rest = stat.rsplit_once(')')?.1;
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks: f64 = f.get(11)?.parse::<f64>().ok()? + f.get(12)?.parse::<f64>().ok()?;
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64;
    Some(ticks / hz)
}

/// One simulated agent: registers, then heartbeats and long-polls until told to stop.
async fn agent(
    client: Arc<Client>,
    name: NodeName,
    gpus: u32,
    every: Duration,
    marks: Arc<Marks>,
    stop: Arc<AtomicBool>,
) {
    let inv = demo::node(name.as_str(), gpus);
    loop {
        match client
            .command(ClientCommand::RegisterNode(inv.clone()))
            .await
        {
            Ok(Ok(_)) => break,
            _ => tokio::time::sleep(Duration::from_millis(500)).await,
        }
    }
    marks.registered.fetch_add(1, Ordering::Relaxed);
    let (c, n, m, s) = (client.clone(), name.clone(), marks.clone(), stop.clone());
    tokio::spawn(async move {
        // Heartbeats spread over the interval, as agents started at different times are.
        tokio::time::sleep(every.mul_f64(rand::random::<f64>())).await;
        while !s.load(Ordering::Relaxed) {
            let t = Instant::now();
            let r = c.heartbeat(n.clone()).await;
            if m.measuring.load(Ordering::Relaxed) {
                match r {
                    Ok(_) => m
                        .heartbeats
                        .lock()
                        .unwrap()
                        .push(t.elapsed().as_secs_f64() * 1e3),
                    Err(_) => {
                        m.heartbeat_errors.fetch_add(1, Ordering::Relaxed);
                    }
                }
            }
            tokio::time::sleep(every.saturating_sub(t.elapsed())).await;
        }
    });
    let mut after = None;
    let mut seen: HashSet<(JobId, u32)> = HashSet::new();
    while !stop.load(Ordering::Relaxed) {
        let query = Query::NodeWork {
            node: name.clone(),
            after,
            wait_ms: 10_000,
        };
        match client.read(query, true).await {
            Ok(Response::NodeWork(w)) => {
                after = Some(w.applied);
                let now = now_ms();
                for item in w.items {
                    if seen.insert((item.job, item.attempt)) {
                        let ms = now.saturating_sub(item.scheduled_at) as f64;
                        marks.notified.lock().unwrap().push((item.job, ms));
                        let c = client.clone();
                        tokio::spawn(async move {
                            let _ = c
                                .command(ClientCommand::JobProgress {
                                    job: item.job,
                                    attempt: item.attempt,
                                    event: Progress::Running,
                                })
                                .await;
                        });
                    }
                }
            }
            _ => {
                after = None;
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
        }
    }
}

pub async fn scale(args: &ScaleArgs) -> Result<(), String> {
    let (_keep, mut c) = args.cluster.start(3)?;
    let total = args.nodes as u32 * args.gpus;
    let (admin, leader) = prepare_one_share(&mut c, "bench", total).await?;

    // Agents: their certificates, then their clients on a few shared UDP sockets.
    let t = Instant::now();
    let endpoints: Vec<quinn::Endpoint> = (0..8)
        .map(|_| quinn::Endpoint::client("0.0.0.0:0".parse().unwrap()))
        .collect::<Result<_, _>>()
        .map_err(|e| format!("cannot open a UDP socket: {e}"))?;
    let marks = Arc::new(Marks::default());
    let stop = Arc::new(AtomicBool::new(false));
    let every = Duration::from_millis(args.heartbeat_ms);
    let names: Vec<String> = (0..args.nodes).map(|i| format!("sim-{i:05}")).collect();
    let certs = c.certs.clone();
    let addrs = c.client_addrs();
    let mut tasks = Vec::new();
    for (i, name) in names.iter().enumerate() {
        let files = match TlsFiles::in_dir(&certs, Role::Agent, name) {
            f if f.cert.exists() => f,
            _ => c.issue(Role::Agent, name)?,
        };
        let cfg = tranche_tls::client_config(&files).map_err(|e| e.to_string())?;
        let client =
            Client::with_endpoint(endpoints[i % endpoints.len()].clone(), addrs.clone(), cfg)
                .map_err(|e| e.to_string())?;
        client.prefer(leader);
        tasks.push(tokio::spawn(agent(
            Arc::new(client),
            name.as_str().into(),
            args.gpus,
            every,
            marks.clone(),
            stop.clone(),
        )));
        // Agents come up in waves, each once the previous one is registered: a
        // handshake and a write each, which thousands at once would turn into timeouts
        // and reconnections.
        if (i + 1) % WAVE == 0 {
            let want = i + 1;
            wait_until(
                "a wave of agents registered",
                Duration::from_secs(120),
                async || match marks.registered.load(Ordering::Relaxed) {
                    r if r >= want => Ok(()),
                    r => Err(format!("{r} of {want}")),
                },
            )
            .await?;
        }
    }
    let n = args.nodes;
    wait_until(
        "every node registered",
        Duration::from_secs(600),
        async || match marks.registered.load(Ordering::Relaxed) {
            r if r == n => Ok(()),
            r => Err(format!("{r} of {n}")),
        },
    )
    .await?;
    let ready_s = t.elapsed().as_secs_f64();
    if !args.json {
        eprintln!(
            "{n} agents registered in {ready_s:.1} s; measuring {} s at rest",
            args.rest
        );
    }
    // Let the heartbeats spread out before measuring.
    tokio::time::sleep(every * 2).await;

    // At rest.
    let leader = c
        .wait_leader(&admin, Duration::from_secs(15))
        .await
        .ok_or("no leader")?;
    let pid = c.controllers[leader]
        .child
        .as_ref()
        .map(|ch| ch.id())
        .ok_or("the leader's process is gone")?;
    let commit0 = c
        .status_of(&admin, leader)
        .await
        .ok_or("leader status")?
        .commit;
    let cpu0 = cpu_seconds(pid).ok_or("leader CPU unreadable")?;
    let t0 = Instant::now();
    marks.measuring.store(true, Ordering::Relaxed);
    tokio::time::sleep(Duration::from_secs(args.rest)).await;
    marks.measuring.store(false, Ordering::Relaxed);
    let secs = t0.elapsed().as_secs_f64();
    let commit1 = c
        .status_of(&admin, leader)
        .await
        .ok_or("leader status")?
        .commit;
    let cpu1 = cpu_seconds(pid).ok_or("leader CPU unreadable")?;
    let entries_per_s = (commit1 - commit0) as f64 / secs;
    let leader_cpu_percent = (cpu1 - cpu0) / secs * 100.0;
    let hb = Spread::of(&marks.heartbeats.lock().unwrap());
    let hb_count = marks.heartbeats.lock().unwrap().len();
    let hb_errors = marks.heartbeat_errors.load(Ordering::Relaxed);

    // Placements, one at a time: each job's entry time to its agent's answer.
    let mut placed = Vec::new();
    for k in 0..args.placements {
        let mut spec = JobSpec::new(&format!("p{k}"), "q", "bench", "bench", "h100", 1, 1);
        spec.command = vec!["sleep".into(), "3600".into()];
        let (id, _) = admin.submit(spec).await.map_err(|e| e.to_string())?;
        placed.push(id);
        let got = wait_until(
            "the placement reached its agent",
            Duration::from_secs(30),
            async || match marks.notified.lock().unwrap().iter().any(|(j, _)| *j == id) {
                true => Ok(()),
                false => Err(format!("job {id} not yet seen")),
            },
        )
        .await;
        got?;
    }
    let notified: Vec<f64> = marks
        .notified
        .lock()
        .unwrap()
        .iter()
        .filter(|(j, _)| placed.contains(j))
        .map(|(_, ms)| *ms)
        .collect();
    let nt = Spread::of(&notified);
    stop.store(true, Ordering::Relaxed);
    for t in tasks {
        t.abort();
    }
    if args.json {
        print_json(serde_json::json!({
            "bench": "scale",
            "nodes": n,
            "gpus_per_node": args.gpus,
            "heartbeat_ms": args.heartbeat_ms,
            "registered_in_s": ready_s,
            "rest_s": secs,
            "raft_entries_per_s_at_rest": entries_per_s,
            "leader_cpu_percent_at_rest": leader_cpu_percent,
            "heartbeats": hb_count,
            "heartbeat_errors": hb_errors,
            "heartbeat_ms_p50": hb.p50,
            "heartbeat_ms_p99": hb.p99,
            "heartbeat_ms_max": hb.max,
            "placements": notified.len(),
            "notify_ms_p50": nt.p50,
            "notify_ms_p99": nt.p99,
            "notify_ms_max": nt.max,
        }));
    } else {
        println!(
            "{n} simulated agents ({} GPUs each), heartbeats every {} ms",
            args.gpus, args.heartbeat_ms
        );
        println!("  registered in            {ready_s:.1} s");
        println!("  at rest, over {secs:.1} s:");
        println!("    raft entries/s         {entries_per_s:.2}");
        println!("    leader CPU             {leader_cpu_percent:.0}%");
        println!(
            "    heartbeat answer       p50 {:.1} ms, p99 {:.1} ms, max {:.1} ms ({hb_count} answered, {hb_errors} failed)",
            hb.p50, hb.p99, hb.max
        );
        println!(
            "  placement → agent        p50 {:.1} ms, p99 {:.1} ms, max {:.1} ms ({} placements)",
            nt.p50,
            nt.p99,
            nt.max,
            notified.len()
        );
    }
    Ok(())
}
