//! `tranche bench submit` and `tranche bench failover`: a local controller trio of real
//! `tranched` processes with durable storage, driven over QUIC with mutual TLS.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tranche_client::Client;
use tranche_local::{demo, find_tranched, LocalCluster, LocalOptions};
use tranche_proto::{JobFilter, Query, Response};
use tranche_tls::Role;

use super::stats::{print_json, Spread};
use super::KeepDir;
use tranche_client::unexpected_text;

/// Where a benchmark's controllers keep their files, and what their config adds.
#[derive(clap::Args, Debug)]
pub struct ClusterDir {
    /// Where the controllers' data dirs go (default: a temporary dir on this disk).
    #[arg(long)]
    dir: Option<PathBuf>,
    /// TOML appended to every controller's config, e.g. "[raft]\ntick_ms = 20".
    #[arg(long, default_value = "")]
    controller_config: String,
}

impl ClusterDir {
    /// A started cluster of `n` controllers there, with that config.
    pub(super) fn start(&self, n: usize) -> Result<(KeepDir, LocalCluster), String> {
        start_cluster(n, &self.dir, &self.controller_config)
    }
}

#[derive(clap::Args, Debug)]
pub struct SubmitArgs {
    /// Controllers in the local cluster.
    #[arg(long, default_value_t = 3)]
    controllers: usize,
    /// Concurrent clients, each with one request in flight at a time.
    #[arg(long, default_value_t = 64)]
    clients: usize,
    /// QUIC connections to the leader that the clients share (as the etcd peer's
    /// benchmark spreads its 64 clients over 8 gRPC connections).
    #[arg(long, default_value_t = 8)]
    conns: usize,
    /// Seconds of load.
    #[arg(long, default_value_t = 10)]
    duration: u64,
    #[command(flatten)]
    cluster: ClusterDir,
    /// UNSAFE, to measure what the disk costs: the controllers run with
    /// `raft.unsafe_no_fsync = true` and never fsync their logs, so the submits are not
    /// durable writes.
    #[arg(long)]
    no_fsync: bool,
    /// One JSON object instead of text.
    #[arg(long)]
    json: bool,
}

/// `extra` (controller TOML) with `unsafe_no_fsync = true` in its `[raft]` table, which
/// is added when it has none.
fn with_no_fsync(extra: &str) -> String {
    let extra = extra.replace("\\n", "\n");
    let key = "unsafe_no_fsync = true";
    let mut lines: Vec<String> = extra.lines().map(str::to_string).collect();
    match lines.iter().position(|l| l.trim() == "[raft]") {
        Some(i) => lines.insert(i + 1, key.to_string()),
        None => lines.extend(["[raft]".to_string(), key.to_string()]),
    }
    lines.join("\n") + "\n"
}

#[derive(clap::Args, Debug)]
pub struct FailoverArgs {
    /// Leader kills.
    #[arg(long, default_value_t = 5)]
    rounds: u32,
    /// Concurrent clients submitting throughout.
    #[arg(long, default_value_t = 16)]
    clients: usize,
    #[command(flatten)]
    cluster: ClusterDir,
    #[arg(long)]
    json: bool,
}

pub(super) fn start_cluster(
    n: usize,
    dir: &Option<PathBuf>,
    extra: &str,
) -> Result<(KeepDir, LocalCluster), String> {
    let (keep, mut c) = create_cluster(n, dir, extra)?;
    c.start_all()?;
    Ok((keep, c))
}

/// [`start_cluster`] without starting it: its files written, nothing running.
pub(super) fn create_cluster(
    n: usize,
    dir: &Option<PathBuf>,
    extra: &str,
) -> Result<(KeepDir, LocalCluster), String> {
    let tranched = find_tranched();
    if !tranched.exists() && std::env::var("TRANCHED").is_err() {
        return Err(format!(
            "`tranched` not found at {}; build it beside `tranche` (cargo build --release --workspace) or set TRANCHED",
            tranched.display()
        ));
    }
    let base = match dir {
        Some(d) => {
            std::fs::create_dir_all(d).map_err(|e| format!("{}: {e}", d.display()))?;
            tempfile::tempdir_in(d)
        }
        None => tempfile::tempdir(),
    }
    .map_err(|e| format!("cannot make a temporary dir: {e}"))?;
    let mut opts = LocalOptions::new(tranched);
    opts.extra_config = extra.replace("\\n", "\n");
    if std::env::var("TRANCHE_LOG").is_err() {
        opts.log_filter = "warn".into();
    }
    if std::env::var_os("TRANCHE_KEEP").is_some() {
        eprintln!("keeping the cluster's files in {}", base.path().display());
    }
    let c = LocalCluster::create(base.path(), n, opts)?;
    Ok((KeepDir(Some(base)), c))
}

pub(super) async fn prepare(c: &mut LocalCluster) -> Result<(Client, usize), String> {
    prepare_with(c, demo::objects()).await
}

/// An admin client preferring the elected leader, and the leader's position, once
/// `objects` are applied.
async fn prepare_with(
    c: &mut LocalCluster,
    objects: Vec<tranche_proto::ClientCommand>,
) -> Result<(Client, usize), String> {
    let admin = c.client(Role::Admin, "admin")?;
    let leader = c
        .wait_leader(&admin, Duration::from_secs(15))
        .await
        .ok_or("no leader elected within 15 s")?;
    admin.prefer(leader);
    admin
        .apply_all(objects)
        .await
        .map_err(|e| format!("the policy was refused: {e}"))?;
    Ok((admin, leader))
}

/// [`prepare`] with a policy of one share `share` (LEND, the widest job limits) over
/// `gpus` H100s: for benchmarks whose simulated nodes bring those GPUs.
pub(super) async fn prepare_one_share(
    c: &mut LocalCluster,
    share: &str,
    gpus: u32,
) -> Result<(Client, usize), String> {
    let mut objects = demo::base(vec![tranche_model::CapacityLimit {
        unit: "h100".into(),
        max: gpus,
    }]);
    objects.push(tranche_proto::ClientCommand::PutShare(
        tranche_model::QuotaShare {
            limits: tranche_model::JobLimits::widest(),
            ..demo::share(share, tranche_model::Strategy::Lend, gpus, &[])
        },
    ));
    prepare_with(c, objects).await
}

/// Waits for the load clients (told to stop) and puts together what each recorded
/// and how many of its requests failed.
async fn gather<T>(
    tasks: Vec<tokio::task::JoinHandle<(Vec<T>, u64)>>,
) -> Result<(Vec<T>, u64), String> {
    let mut all = Vec::new();
    let mut errors = 0;
    for t in tasks {
        let (got, e) = t.await.map_err(|e| e.to_string())?;
        all.extend(got);
        errors += e;
    }
    Ok((all, errors))
}

pub async fn submit(args: &SubmitArgs) -> Result<(), String> {
    if args.clients == 0 || args.duration == 0 || args.controllers == 0 || args.conns == 0 {
        return Err("--clients, --conns, --duration and --controllers must be positive".into());
    }
    let extra = match args.no_fsync {
        true => {
            eprintln!("tranche bench submit: --no-fsync: the controllers never fsync their logs; these are not durable writes");
            with_no_fsync(&args.cluster.controller_config)
        }
        false => args.cluster.controller_config.clone(),
    };
    let (_tmp, mut c) = start_cluster(args.controllers, &args.cluster.dir, &extra)?;
    let (_admin, leader) = prepare(&mut c).await?;
    let stop = Arc::new(AtomicBool::new(false));
    let seq = Arc::new(AtomicU64::new(0));
    let mut conns = Vec::new();
    for _ in 0..args.conns.min(args.clients) {
        let client = c.client(Role::Admin, "admin")?;
        client.prefer(leader);
        conns.push(Arc::new(client));
    }
    let mut tasks = Vec::new();
    for i in 0..args.clients {
        let client = conns[i % conns.len()].clone();
        let stop = stop.clone();
        let seq = seq.clone();
        tasks.push(tokio::spawn(async move {
            let mut lat = Vec::new();
            let mut errors = 0u64;
            while !stop.load(Ordering::Relaxed) {
                let token = format!("b{}", seq.fetch_add(1, Ordering::Relaxed));
                let t = Instant::now();
                let r = client.submit(demo::job("borrow", "bench", &token)).await;
                if t.elapsed() > Duration::from_secs(1) {
                    let outcome = match &r {
                        Ok(_) => "acknowledged".to_string(),
                        Err(e) => e.to_string(),
                    };
                    eprintln!(
                        "slow submit {token}: {} ms, {outcome}",
                        t.elapsed().as_millis()
                    );
                }
                match r {
                    Ok(_) => lat.push(t.elapsed().as_secs_f64() * 1000.0),
                    Err(_) => errors += 1,
                }
            }
            (lat, errors)
        }));
    }
    let started = Instant::now();
    tokio::time::sleep(Duration::from_secs(args.duration)).await;
    stop.store(true, Ordering::Relaxed);
    let (lat, errors) = gather(tasks).await?;
    let elapsed = started.elapsed().as_secs_f64();
    let n = lat.len();
    let rate = n as f64 / elapsed;
    let Spread { p50, p99, max, .. } = Spread::of(&lat);
    if args.json {
        print_json(serde_json::json!({
                "controllers": args.controllers,
                "fsync": !args.no_fsync,
                "clients": args.clients,
                "conns": conns.len(),
                "duration_s": elapsed,
                "submits": n,
                "errors": errors,
                "submits_per_s": rate,
                "p50_ms": p50,
                "p99_ms": p99,
        "max_ms": max,
        }));
    } else {
        println!("controllers        {}", args.controllers);
        if args.no_fsync {
            println!("fsync              off (unsafe_no_fsync: not durable writes)");
        }
        println!(
            "clients            {} over {} connections",
            args.clients,
            conns.len()
        );
        println!("acknowledged       {n} submits in {elapsed:.1} s ({errors} errors)");
        println!("submits/s          {rate:.0}");
        println!("latency p50/p99    {p50:.2} / {p99:.2} ms (max {max:.1} ms)");
    }
    Ok(())
}

pub async fn failover(args: &FailoverArgs) -> Result<(), String> {
    if args.rounds == 0 {
        return Err("--rounds must be positive".into());
    }
    let (_tmp, mut c) = args.cluster.start(3)?;
    let (admin, _) = prepare(&mut c).await?;
    let stop = Arc::new(AtomicBool::new(false));
    let seq = Arc::new(AtomicU64::new(0));
    let mut tasks = Vec::new();
    for _ in 0..args.clients {
        let mut client = c.client(Role::Admin, "admin")?;
        client.attempt_timeout = Duration::from_millis(300);
        client.retry_for = Duration::from_secs(30);
        let stop = stop.clone();
        let seq = seq.clone();
        tasks.push(tokio::spawn(async move {
            let mut acked: Vec<(String, u64)> = Vec::new();
            let mut errors = 0u64;
            while !stop.load(Ordering::Relaxed) {
                let token = format!("f{}", seq.fetch_add(1, Ordering::Relaxed));
                match client.submit(demo::job("borrow", "bench", &token)).await {
                    Ok((id, _)) => acked.push((token, id.0)),
                    Err(_) => errors += 1,
                }
            }
            (acked, errors)
        }));
    }
    let mut times = Vec::new();
    for round in 0..args.rounds {
        tokio::time::sleep(Duration::from_millis(1500)).await;
        let leader = c
            .wait_leader(&admin, Duration::from_secs(15))
            .await
            .ok_or("no leader before the kill")?;
        let mut probe = c.client(Role::Admin, "admin")?;
        probe.attempt_timeout = Duration::from_millis(300);
        probe.retry_for = Duration::from_secs(30);
        // The probe is connected (to any controller) before the kill, as a busy
        // client would be.
        let _ = probe.read(Query::Controllers, true).await;
        c.kill(leader);
        let t0 = Instant::now();
        let token = format!("probe{round}");
        probe
            .submit(demo::job("borrow", "bench", &token))
            .await
            .map_err(|e| format!("round {round}: no write acknowledged after the kill: {e}"))?;
        let ms = t0.elapsed().as_secs_f64() * 1000.0;
        times.push(ms);
        if !args.json {
            println!(
                "round {round}: killed controller {}; next write acknowledged after {ms:.0} ms",
                leader + 1
            );
        }
        c.start(leader)?;
    }
    stop.store(true, Ordering::Relaxed);
    let (acked, errors) = gather(tasks).await?;
    // Every acknowledged submit must be there exactly once.
    let jobs = match admin.read(Query::Jobs(JobFilter::default()), false).await {
        Ok(Response::Jobs(j)) => j,
        Ok(other) => return Err(format!("cannot list jobs: {}", unexpected_text(&other))),
        Err(e) => return Err(format!("cannot list jobs: {e}")),
    };
    let mut by_token: BTreeMap<String, Vec<u64>> = BTreeMap::new();
    for j in &jobs {
        if let Some(t) = &j.client_token {
            by_token.entry(t.clone()).or_default().push(j.id.0);
        }
    }
    let lost = acked
        .iter()
        .filter(|(t, id)| by_token.get(t) != Some(&vec![*id]))
        .count();
    let duplicated = by_token.values().filter(|v| v.len() > 1).count();
    let Spread {
        p50: median, max, ..
    } = Spread::of(&times);
    if args.json {
        print_json(serde_json::json!({
                "rounds": args.rounds,
                "failover_ms": times,
                "failover_ms_median": median,
                "failover_ms_max": max,
                "acked": acked.len(),
                "acked_lost": lost,
                "duplicated": duplicated,
        "client_errors": errors,
        }));
    } else {
        println!(
            "failover median    {median:.0} ms (max {max:.0} ms) over {} rounds",
            args.rounds
        );
        println!(
            "acknowledged       {} submits under load; lost {lost}, duplicated {duplicated}",
            acked.len()
        );
    }
    if lost > 0 || duplicated > 0 {
        return Err(format!(
            "{lost} acknowledged submits lost, {duplicated} duplicated"
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::with_no_fsync;

    #[test]
    fn no_fsync_goes_into_the_raft_table() {
        assert_eq!(with_no_fsync(""), "[raft]\nunsafe_no_fsync = true\n");
        assert_eq!(
            with_no_fsync("threads = 2\\n[raft]\\ntick_ms = 20"),
            "threads = 2\n[raft]\nunsafe_no_fsync = true\ntick_ms = 20\n"
        );
        assert_eq!(
            with_no_fsync("[sched]\nmin_gap_ms = 5\n"),
            "[sched]\nmin_gap_ms = 5\n[raft]\nunsafe_no_fsync = true\n"
        );
    }
}
