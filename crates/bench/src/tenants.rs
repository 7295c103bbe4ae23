//! `tranche bench array-memory` and `tranche bench flood`: what one tenant can do to the
//! controllers. The first measures the controllers' resident memory before and after
//! one large array job with a large environment; the second has one user submit as fast
//! as it can while another submits at a steady pace, and compares the second user's
//! latency with a quiet baseline.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tranche_client::Client;
use tranche_local::{demo, LocalCluster};
use tranche_model::{ArraySpec, JobSpec};
use tranche_proto::ClusterStatus;
use tranche_tls::Role;

use super::cluster::{prepare, start_cluster};
use super::stats::{print_json, Spread};

#[derive(clap::Args, Debug)]
pub struct ArrayMemoryArgs {
    /// Tasks in the array.
    #[arg(long, default_value_t = 10_000)]
    tasks: u32,
    /// Bytes of environment in the array's spec (in variables of at most 32,000 bytes).
    #[arg(long, default_value_t = 64_000)]
    env_bytes: usize,
    /// Where the controllers' data dirs go (default: a temporary dir on this disk).
    #[arg(long)]
    dir: Option<std::path::PathBuf>,
    #[arg(long)]
    json: bool,
}

#[derive(clap::Args, Debug)]
pub struct FloodArgs {
    /// Seconds the flooding user submits for.
    #[arg(long, default_value_t = 60)]
    duration: u64,
    /// Seconds of each quiet phase (the steady user alone), before and after the flood.
    #[arg(long, default_value_t = 20)]
    baseline: u64,
    /// Concurrent submits the flooding user keeps in flight, over as many connections.
    #[arg(long, default_value_t = 32)]
    clients: usize,
    /// Milliseconds between the steady user's submits.
    #[arg(long, default_value_t = 100)]
    every_ms: u64,
    #[arg(long)]
    dir: Option<std::path::PathBuf>,
    #[arg(long)]
    json: bool,
}

/// The resident set of process `pid` in MiB, from `/proc/<pid>/status`.
pub(super) fn rss_mib(pid: u32) -> Result<f64, String> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/status"))
        .map_err(|e| format!("/proc/{pid}/status: {e}"))?;
    text.lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
        .map(|kb| kb / 1024.0)
        .ok_or_else(|| format!("/proc/{pid}/status has no VmRSS line"))
}

pub(super) fn pids(c: &LocalCluster) -> Result<Vec<u32>, String> {
    c.controllers
        .iter()
        .map(|k| {
            k.child
                .as_ref()
                .map(|ch| ch.id())
                .ok_or_else(|| format!("controller {} is not running", k.member.id))
        })
        .collect()
}

async fn applied_index(c: &LocalCluster, admin: &Client, i: usize) -> u64 {
    c.status_of(admin, i)
        .await
        .map(|s: ClusterStatus| s.applied)
        .unwrap_or(0)
}

pub async fn array_memory(args: &ArrayMemoryArgs) -> Result<(), String> {
    if args.tasks == 0 {
        return Err("--tasks must be positive".into());
    }
    let (_tmp, mut c) = start_cluster(3, &args.dir, "")?;
    let (admin, leader) = prepare(&mut c).await?;
    let pids = pids(&c)?;
    // Let the policy's entries settle everywhere before the first reading.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let before: Vec<f64> = pids.iter().map(|p| rss_mib(*p)).collect::<Result<_, _>>()?;
    let alice = c.client(Role::User, "alice")?;
    alice.prefer(leader);
    let mut spec: JobSpec = demo::job("borrow", "alice", "array-memory");
    spec.array =
        Some(ArraySpec::parse(&format!("0-{}", args.tasks - 1)).map_err(|e| e.to_string())?);
    spec.hold = true;
    // In values of at most 32,000 bytes, under the per-value limit.
    let mut left = args.env_bytes;
    while left > 0 {
        let n = left.min(32_000);
        let name = format!("PAYLOAD_{}", spec.env.len());
        spec.env.insert(name, "x".repeat(n));
        left -= n;
    }
    let t = Instant::now();
    let outcome = alice.submit(spec).await;
    let submit_ms = t.elapsed().as_secs_f64() * 1000.0;
    let refused = match &outcome {
        Ok(_) => None,
        Err(e) => Some(e.to_string()),
    };
    // Wait until every controller has applied what the leader has.
    let target = applied_index(&c, &admin, leader).await;
    let deadline = Instant::now() + Duration::from_secs(60);
    for i in 0..c.controllers.len() {
        while applied_index(&c, &admin, i).await < target && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    tokio::time::sleep(Duration::from_secs(2)).await;
    let after: Vec<f64> = pids.iter().map(|p| rss_mib(*p)).collect::<Result<_, _>>()?;
    let growth: Vec<f64> = before.iter().zip(&after).map(|(b, a)| a - b).collect();
    if args.json {
        print_json(serde_json::json!({
            "tasks": args.tasks,
            "env_bytes": args.env_bytes,
            "submit_ms": submit_ms,
            "refused": refused,
            "leader": leader,
            "rss_before_mib": before,
            "rss_after_mib": after,
            "growth_mib": growth,
        }));
    } else {
        println!(
            "one array of {} tasks with {} bytes of env, submitted in {:.0} ms{}",
            args.tasks,
            args.env_bytes,
            submit_ms,
            match &refused {
                None => String::new(),
                Some(e) => format!(" — refused: {e}"),
            }
        );
        for (i, g) in growth.iter().enumerate() {
            println!(
                "controller {}{}: {:.0} MiB → {:.0} MiB (+{:.0} MiB)",
                i + 1,
                if i == leader { " (leader)" } else { "" },
                before[i],
                after[i],
                g
            );
        }
    }
    Ok(())
}

/// One steady user's submits, one every `every`, until `stop`: latencies in ms and
/// the number refused or failed.
async fn steady(
    client: Arc<Client>,
    every: Duration,
    stop: Arc<AtomicBool>,
    tag: &'static str,
) -> (Vec<f64>, u64) {
    let mut lat = Vec::new();
    let mut failed = 0;
    let mut n = 0u64;
    let mut tick = tokio::time::interval(every);
    while !stop.load(Ordering::Relaxed) {
        tick.tick().await;
        n += 1;
        let t = Instant::now();
        match client
            .submit(demo::job("lend", "alice", &format!("{tag}{n}")))
            .await
        {
            Ok(_) => lat.push(t.elapsed().as_secs_f64() * 1000.0),
            Err(_) => failed += 1,
        }
    }
    (lat, failed)
}

pub async fn flood(args: &FloodArgs) -> Result<(), String> {
    if args.clients == 0 || args.duration == 0 || args.every_ms == 0 {
        return Err("--clients, --duration and --every-ms must be positive".into());
    }
    let (_tmp, mut c) = start_cluster(3, &args.dir, "")?;
    let (_admin, leader) = prepare(&mut c).await?;
    // Alice's client runs on a thread and runtime of its own, so that the flood's
    // client tasks (in this process) do not delay her submits before they are sent.
    let addrs = c.client_addrs();
    c.issue(Role::User, "alice")?;
    let files = tranche_tls::TlsFiles::in_dir(&c.certs, Role::User, "alice");
    let every = Duration::from_millis(args.every_ms);
    let alice_run = move |stop: Arc<AtomicBool>, tag: &'static str| {
        let (addrs, files) = (addrs.clone(), files.clone());
        std::thread::spawn(move || -> Result<(Vec<f64>, u64), String> {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .map_err(|e| e.to_string())?;
            rt.block_on(async move {
                let alice = Client::new(addrs, &files).map_err(|e| e.to_string())?;
                alice.prefer(leader);
                Ok(steady(Arc::new(alice), every, stop, tag).await)
            })
        })
    };

    // The quiet baseline: alice alone.
    let stop = Arc::new(AtomicBool::new(false));
    let base = alice_run(stop.clone(), "base");
    tokio::time::sleep(Duration::from_secs(args.baseline)).await;
    stop.store(true, Ordering::Relaxed);
    let (base_lat, base_failed) = base.join().map_err(|_| "alice's thread panicked")??;

    // The flood: mallory on `clients` connections, alice at her pace.
    let stop = Arc::new(AtomicBool::new(false));
    let accepted = Arc::new(AtomicU64::new(0));
    let refused = Arc::new(AtomicU64::new(0));
    let seq = Arc::new(AtomicU64::new(0));
    let mut floods = Vec::new();
    let first_refusal = Arc::new(std::sync::OnceLock::<String>::new());
    for _ in 0..args.clients {
        let m = c.client(Role::User, "mallory")?;
        m.prefer(leader);
        let (stop, accepted, refused, seq, first_refusal) = (
            stop.clone(),
            accepted.clone(),
            refused.clone(),
            seq.clone(),
            first_refusal.clone(),
        );
        floods.push(tokio::spawn(async move {
            while !stop.load(Ordering::Relaxed) {
                let token = format!("m{}", seq.fetch_add(1, Ordering::Relaxed));
                match m.submit(demo::job("borrow", "mallory", &token)).await {
                    Ok(_) => {
                        accepted.fetch_add(1, Ordering::Relaxed);
                    }
                    Err(e) => {
                        // Like a hostile client, it retries at once.
                        refused.fetch_add(1, Ordering::Relaxed);
                        let _ = first_refusal.set(e.to_string());
                    }
                }
            }
        }));
    }
    let during = alice_run(stop.clone(), "during");
    let started = Instant::now();
    tokio::time::sleep(Duration::from_secs(args.duration)).await;
    stop.store(true, Ordering::Relaxed);
    let (lat, failed) = during.join().map_err(|_| "alice's thread panicked")??;
    for f in floods {
        f.await.map_err(|e| e.to_string())?;
    }
    // Alice alone again, with mallory's accepted jobs still queued: what the flood's
    // traffic costs her, apart from the longer queue it leaves behind.
    let stop = Arc::new(AtomicBool::new(false));
    let after = alice_run(stop.clone(), "after");
    tokio::time::sleep(Duration::from_secs(args.baseline)).await;
    stop.store(true, Ordering::Relaxed);
    let (after_lat, after_failed) = after.join().map_err(|_| "alice's thread panicked")??;
    let first_refusal = first_refusal.get().cloned();
    let elapsed = started.elapsed().as_secs_f64();
    let b = Spread::of(&base_lat);
    let d = Spread::of(&lat);
    let a = Spread::of(&after_lat);
    let (acc, refd) = (
        accepted.load(Ordering::Relaxed),
        refused.load(Ordering::Relaxed),
    );
    if args.json {
        print_json(serde_json::json!({
            "duration_s": elapsed,
            "flood_clients": args.clients,
            "flood_accepted": acc,
            "flood_refused": refd,
            "flood_first_refusal": first_refusal,
            "steady_every_ms": args.every_ms,
            "baseline": {"submits": base_lat.len(), "failed": base_failed, "p50_ms": b.p50, "p99_ms": b.p99, "max_ms": b.max},
            "during": {"submits": lat.len(), "failed": failed, "p50_ms": d.p50, "p99_ms": d.p99, "max_ms": d.max},
            "after": {"submits": after_lat.len(), "failed": after_failed, "p50_ms": a.p50, "p99_ms": a.p99, "max_ms": a.max},
        }));
    } else {
        println!(
            "mallory, {} connections for {:.0} s: {} submits accepted, {} refused{}",
            args.clients,
            elapsed,
            acc,
            refd,
            first_refusal
                .map(|e| format!(" (first refusal: {e})"))
                .unwrap_or_default()
        );
        println!(
            "alice alone:      {} submits, {} failed, p50 {:.1} ms, p99 {:.1} ms, max {:.1} ms",
            base_lat.len(),
            base_failed,
            b.p50,
            b.p99,
            b.max
        );
        println!(
            "alice during it:  {} submits, {} failed, p50 {:.1} ms, p99 {:.1} ms, max {:.1} ms",
            lat.len(),
            failed,
            d.p50,
            d.p99,
            d.max
        );
        println!(
            "alice after it:   {} submits, {} failed, p50 {:.1} ms, p99 {:.1} ms, max {:.1} ms",
            after_lat.len(),
            after_failed,
            a.p50,
            a.p99,
            a.max
        );
    }
    Ok(())
}
