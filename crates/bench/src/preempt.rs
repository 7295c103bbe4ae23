//! `tranche bench preempt`: signal and start latency on a local cluster of real
//! processes (3 controllers, 2 agents with 8 fake GPUs each, the process executor).

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tranche_client::Client;
use tranche_local::demo;
use tranche_model::{JobId, JobRef, JobSpec, JobStatus};
use tranche_proto::ClientCommand;
use tranche_proto::{Query, Response};

use super::agent_cluster;
use super::stats::{print_json, Spread};
use tranche_client::unexpected_text;

#[derive(clap::Args, Debug)]
pub struct PreemptArgs {
    /// Preempted jobs to measure (rounds of 8 are run until there are this many).
    #[arg(long, default_value_t = 40)]
    jobs: usize,
    /// Run the jobs in containers (runc) from this image: a rootfs directory or an OCI
    /// image layout, with `sh`, `sleep` and `nc` (a busybox rootfs will do). Without it,
    /// jobs are plain processes.
    #[arg(long)]
    image: Option<PathBuf>,
    /// One JSON object instead of text.
    #[arg(long)]
    json: bool,
}

/// When each mark arrived over TCP, in ms since the epoch, by kind, job and attempt.
type Seen = Arc<Mutex<HashMap<(String, u64, u32), f64>>>;

/// How jobs tell the benchmark when they started and when they got their signal:
/// plain processes write `date +%s%N` into files; containers, which do not see the
/// host's files, connect to a TCP listener on 127.0.0.1 (they share the host's
/// network) and the benchmark stamps the arrival.
enum Marks {
    Files(PathBuf),
    Tcp { port: u16, seen: Seen },
}

impl Marks {
    /// The shell command that records `kind` for the running job.
    fn cmd(&self, kind: &str) -> String {
        match self {
            Marks::Files(dir) => format!(
                "date +%s%N > {}/{kind}.$TRANCHE_JOB_ID.$TRANCHE_ATTEMPT",
                dir.display()
            ),
            Marks::Tcp { port, .. } => {
                format!("echo {kind} $TRANCHE_JOB_ID $TRANCHE_ATTEMPT | nc 127.0.0.1 {port}")
            }
        }
    }

    /// When `kind` was recorded for that attempt, in ms since the epoch.
    fn get(&self, kind: &str, job: JobId, attempt: u32) -> Option<f64> {
        match self {
            Marks::Files(dir) => {
                std::fs::read_to_string(dir.join(format!("{kind}.{job}.{attempt}")))
                    .ok()?
                    .trim()
                    .parse::<u64>()
                    .ok()
                    .map(|ns| ns as f64 / 1e6)
            }
            Marks::Tcp { seen, .. } => seen
                .lock()
                .unwrap()
                .get(&(kind.to_string(), job.0, attempt))
                .copied(),
        }
    }

    async fn tcp() -> Result<Marks, String> {
        let l = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .map_err(|e| format!("cannot listen for marks: {e}"))?;
        let port = l.local_addr().map_err(|e| e.to_string())?.port();
        let seen = Seen::default();
        let s = seen.clone();
        tokio::spawn(async move {
            while let Ok((mut conn, _)) = l.accept().await {
                let at = std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map(|d| d.as_secs_f64() * 1000.0)
                    .unwrap_or(0.0);
                let s = s.clone();
                tokio::spawn(async move {
                    use tokio::io::AsyncReadExt;
                    let mut buf = String::new();
                    let _ = conn.read_to_string(&mut buf).await;
                    let w: Vec<&str> = buf.split_whitespace().collect();
                    if let [kind, job, attempt] = w[..] {
                        if let (Ok(j), Ok(a)) = (job.parse(), attempt.parse()) {
                            s.lock().unwrap().insert((kind.to_string(), j, a), at);
                        }
                    }
                });
            }
        });
        Ok(Marks::Tcp { port, seen })
    }
}

async fn policy(admin: &Client) -> Result<(), String> {
    admin
        .apply_all(demo::lend_borrow(16, 10))
        .await
        .map_err(|e| format!("policy refused: {e}"))
}

fn job(share: &str, token: &str, image: &str, marks: &Marks, body: &str) -> JobSpec {
    let mut spec = demo::job(share, "bench", token);
    spec.image = image.into();
    // The first instruction records when the job started.
    let script = format!("{}; {body}", marks.cmd("start"));
    spec.command = vec!["sh".into(), "-c".into(), script];
    spec
}

async fn detail(admin: &Client, id: JobId) -> Result<tranche_model::Job, String> {
    match admin.read(Query::Job(JobRef::job(id)), false).await {
        Ok(Response::Job(j)) => Ok(*j),
        Ok(other) => Err(format!("job {id}: {}", unexpected_text(&other))),
        Err(e) => Err(format!("job {id}: {e}")),
    }
}

async fn wait_all(
    admin: &Client,
    ids: &[JobId],
    what: &str,
    f: impl Fn(&tranche_model::Job) -> bool,
) -> Result<(), String> {
    let deadline = Instant::now() + Duration::from_secs(60);
    for &id in ids {
        loop {
            if f(&detail(admin, id).await?) {
                break;
            }
            if Instant::now() > deadline {
                return Err(format!("job {id} never became {what}"));
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
    Ok(())
}

pub async fn preempt(args: &PreemptArgs) -> Result<(), String> {
    // Its fields drop in order: the processes first, the dir last.
    let mut ac = agent_cluster().await?;
    let (c, admin, agent, tmp) = ac.parts();
    policy(admin).await?;
    for n in ["n1", "n2"] {
        c.add_agent(agent, n, "8 x h100", "heartbeat_ms = 1000")?;
    }
    let (image, marks) = match &args.image {
        Some(dir) => (dir.display().to_string(), Marks::tcp().await?),
        None => {
            let dir = tmp.join("marks");
            std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
            ("host".to_string(), Marks::Files(dir))
        }
    };
    let victim_body = format!(
        "trap '{}; kill $! 2>/dev/null; exit 0' TERM; sleep 1000 & wait $!",
        marks.cmd("sig")
    );
    let mut signal_ms = Vec::new();
    let mut start_ms = Vec::new();
    let mut round = 0;
    let mut all = Vec::new();
    while signal_ms.len() < args.jobs {
        // 16 borrower jobs fill both nodes, 8 of them on the lender's idle GPUs.
        let mut borrowers = Vec::new();
        for i in 0..16 {
            let (id, _) = admin
                .submit(job(
                    "borrower",
                    &format!("r{round}b{i}"),
                    &image,
                    &marks,
                    &victim_body,
                ))
                .await
                .map_err(|e| e.to_string())?;
            borrowers.push(id);
        }
        wait_all(admin, &borrowers, "RUNNING", |j| {
            j.status == JobStatus::Running
        })
        .await?;
        // 8 lender jobs take the lender's capacity back from 8 borrowers.
        let mut lenders = Vec::new();
        for i in 0..8 {
            let (id, _) = admin
                .submit(job(
                    "lender",
                    &format!("r{round}l{i}"),
                    &image,
                    &marks,
                    "exit 0",
                ))
                .await
                .map_err(|e| e.to_string())?;
            lenders.push(id);
        }
        wait_all(admin, &lenders, "SUCCEEDED", |j| {
            j.status == JobStatus::Succeeded
        })
        .await?;
        for &id in &borrowers {
            let j = detail(admin, id).await?;
            for t in &j.transitions {
                if t.from == t.to && t.reason.starts_with("stopping (") {
                    // The stop's time is the plan entry's, set by the leader when it
                    // proposed the plan.
                    let attempt = j
                        .attempts
                        .iter()
                        .rev()
                        .find(|a| a.scheduled_at <= t.at)
                        .map(|a| a.number)
                        .unwrap_or(1);
                    if let Some(ms) = marks.get("sig", id, attempt) {
                        signal_ms.push(ms - t.at as f64);
                    }
                }
            }
        }
        all.extend(borrowers.iter().chain(lenders.iter()).copied());
        // Clear the round: cancel what still runs or waits.
        for &id in &borrowers {
            let _ = admin
                .command(ClientCommand::Cancel {
                    job: JobRef::job(id),
                    reason: "benchmark round over".into(),
                })
                .await;
        }
        wait_all(admin, &borrowers, "finished", |j| j.status.is_terminal()).await?;
        round += 1;
        if round > 50 {
            return Err("no preemptions measured after 50 rounds".into());
        }
    }
    for &id in &all {
        let j = detail(admin, id).await?;
        for a in &j.attempts {
            if let Some(ms) = marks.get("start", id, a.number) {
                start_ms.push(ms - a.scheduled_at as f64);
            }
        }
    }
    let n_sig = signal_ms.len();
    let n_start = start_ms.len();
    let Spread {
        p50: s50, p99: s99, ..
    } = Spread::of(&signal_ms);
    let Spread {
        p50: t50, p99: t99, ..
    } = Spread::of(&start_ms);
    if args.json {
        print_json(serde_json::json!({
                "preempted": n_sig, "starts": n_start, "rounds": round,
                "signal_p50_ms": s50, "signal_p99_ms": s99,
                "start_p50_ms": t50, "start_p99_ms": t99,
            "executor": if args.image.is_some() { "runc" } else { "process" },
        }));
    } else {
        println!("preempted jobs measured   {n_sig} over {round} rounds");
        println!("plan committed -> signal  p50 {s50:.1} ms, p99 {s99:.1} ms");
        let executor = if args.image.is_some() {
            "runc"
        } else {
            "process"
        };
        println!("placement -> first instr. p50 {t50:.1} ms, p99 {t99:.1} ms ({n_start} starts, {executor} executor)");
    }
    Ok(())
}
