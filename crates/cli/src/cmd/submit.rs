//! `tranche submit`: a job, an array of jobs, or a batch script whose `#TRANCHE`
//! lines give default options (as `#SBATCH` does); with `--wait`, followed to its end.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::ExitCode;

use tranche_client::{Client, ClientError};
use tranche_model::{Checkpoint, JobId, JobRef, JobSpec, JobStatus};
use tranche_proto::{ApiError, JobFilter, Objects, Query, Response};

use crate::client_cfg::{connect, remember_leader};
use crate::exit::{failed, run, unexpected, usage, CliError};
use crate::parse::{parse_duration, parse_mem};
use crate::timing;

#[derive(clap::Args, Debug)]
pub struct SubmitArgs {
    /// The quota share to run in (required, here or in a `#TRANCHE` line).
    #[arg(long)]
    share: Option<String>,
    /// GPUs in all, as Slurm's --gpus: split evenly over --nodes (this or
    /// --gpus-per-node is required, here or in a `#TRANCHE` line).
    #[arg(long)]
    gpus: Option<u32>,
    /// GPUs on each node.
    #[arg(long, value_name = "N")]
    gpus_per_node: Option<u32>,
    /// Nodes (more than one: a gang, all or nothing).
    #[arg(long, default_value_t = 1)]
    nodes: u32,
    /// GPU unit (default: the share's first).
    #[arg(long)]
    unit: Option<String>,
    /// Queue (default: the share's).
    #[arg(long)]
    queue: Option<String>,
    #[arg(long, default_value_t = 0)]
    priority: u32,
    /// `host` for a plain process, else a rootfs directory or OCI image layout.
    #[arg(long, default_value = "host")]
    image: String,
    /// Time limit: 4h, 90m, 1-00:00:00, ...
    #[arg(long)]
    time: Option<String>,
    /// Checkpoint signal and grace, e.g. SIGUSR1@120.
    #[arg(long)]
    signal: Option<String>,
    /// How often the job saves a checkpoint (30m, 2h, ...), counted from the start of
    /// each attempt: a preemption then loses only the work since the last one. A job
    /// may instead touch $TRANCHE_CHECKPOINT_FILE after each checkpoint it saves.
    #[arg(long, value_name = "DURATION")]
    checkpoint_every: Option<String>,
    /// Requeues allowed after preemption (default: unlimited).
    #[arg(long)]
    preemption_retries: Option<u32>,
    #[arg(long, short = 'J', default_value = "job")]
    name: String,
    /// An array of tasks, in Slurm's syntax: 0-999%50 (at most 50 running at once),
    /// 1,3,5-7, 0-15:4. Each task is a job named ARRAY_TASK (e.g. 42_7).
    #[arg(long, short = 'a', value_name = "INDICES")]
    array: Option<String>,
    /// Start only after other jobs: afterok:ID[:ID...], afterany:..., afternotok:...,
    /// singleton; clauses joined by `,` must all hold. IDs may be arrays (42) or tasks
    /// (42_7).
    #[arg(long, short = 'd', value_name = "DEPENDENCY")]
    dependency: Option<String>,
    /// Submit held: the job stays PENDING until `tranche release`.
    #[arg(long)]
    hold: bool,
    /// Write stdout to this file on the node (relative to the working directory):
    /// %j job id, %A array id, %a task index, %x name, %u user, %N node, %n node rank.
    /// Without --error, stderr goes there too. Default: kept by the agent for
    /// `tranche logs`.
    #[arg(long, short = 'o', value_name = "PATTERN")]
    output: Option<String>,
    /// Write stderr to this file (same patterns as --output).
    #[arg(long, short = 'e', value_name = "PATTERN")]
    error: Option<String>,
    /// CPUs per node (a cgroup CPU limit); default: no limit.
    #[arg(long, value_name = "N")]
    cpus_per_node: Option<u32>,
    /// Memory per node: 64G, 4000M, or MiB; default: no limit.
    #[arg(long, value_name = "SIZE")]
    mem: Option<String>,
    /// Environment variables, K=V (repeatable).
    #[arg(long = "env")]
    env: Vec<String>,
    /// Print only the job id.
    #[arg(long)]
    parsable: bool,
    /// Follow the job to its end and exit with its exit code.
    #[arg(long)]
    wait: bool,
    /// The cluster config (default: $TRANCHE_CONFIG).
    #[arg(long)]
    config: Option<PathBuf>,
    /// The job's working directory (default: this directory). Used on a node where it
    /// exists (a shared file system); elsewhere the job runs in its user's home.
    #[arg(long, short = 'D', value_name = "DIR")]
    chdir: Option<PathBuf>,
    /// A batch script instead of a command: it runs under `sh`, and its `#TRANCHE`
    /// lines (before its first command) give default options, as `#SBATCH` does.
    script: Option<PathBuf>,
    /// The command and its arguments.
    #[arg(last = true)]
    command: Vec<String>,
}

/// The working directory a submit sends: `--chdir` made absolute, else this directory;
/// `None` when this directory cannot be named (deleted, not UTF-8).
fn working_dir(chdir: Option<&std::path::Path>) -> Result<Option<String>, CliError> {
    let here = std::env::current_dir().ok();
    let dir = match (chdir, here) {
        (Some(d), _) if d.is_absolute() => Some(d.to_path_buf()),
        (Some(d), Some(h)) => Some(h.join(d)),
        (Some(d), None) => {
            return Err(usage(format!(
                "--chdir {}: a relative directory needs a current directory",
                d.display()
            )))
        }
        (None, h) => h,
    };
    match dir.map(|d| d.to_str().map(str::to_string)) {
        Some(Some(d)) => Ok(Some(d)),
        Some(None) if chdir.is_some() => Err(usage("--chdir: the directory's name is not UTF-8")),
        _ => Ok(None),
    }
}

/// `submit`'s options alone, to parse a script's directives with the command line's
/// options after them (the command line wins).
#[derive(clap::Parser, Debug)]
#[command(name = "tranche submit", args_override_self = true)]
struct SubmitOnly {
    #[command(flatten)]
    args: SubmitArgs,
}

/// The options in a script's `#TRANCHE` lines, which stand before its first command.
pub fn directives(script: &str) -> Vec<String> {
    let mut out = Vec::new();
    for line in script.lines() {
        let t = line.trim();
        if let Some(rest) = t.strip_prefix("#TRANCHE") {
            out.extend(rest.split_whitespace().map(str::to_string));
        } else if t.is_empty() || t.starts_with('#') {
            continue;
        } else {
            break;
        }
    }
    out
}

/// `tranche submit`, with a script's directives folded in.
pub fn submit_cmd(args: SubmitArgs) -> ExitCode {
    let Some(path) = args.script.clone() else {
        if args.command.is_empty() {
            eprintln!("tranche submit: give a command after `--`, or a script");
            return ExitCode::from(2);
        }
        return submit(&args);
    };
    if !args.command.is_empty() {
        eprintln!("tranche submit: give a script or a command after `--`, not both");
        return ExitCode::from(2);
    }
    let text = match std::fs::read_to_string(&path) {
        Ok(t) => t,
        Err(e) => {
            eprintln!("tranche submit: cannot read {}: {e}", path.display());
            return ExitCode::from(2);
        }
    };
    // The directives first, then the command line as given: later options win.
    let mut argv = vec!["tranche submit".to_string()];
    argv.extend(directives(&text));
    argv.extend(std::env::args().skip(2));
    let mut merged = match <SubmitOnly as clap::Parser>::try_parse_from(&argv) {
        Ok(m) => m.args,
        Err(e) => {
            eprintln!(
                "tranche submit: in {} or the command line: {e}",
                path.display()
            );
            return ExitCode::from(2);
        }
    };
    merged.script = None;
    merged.command = vec!["sh".into(), "-c".into(), text];
    submit(&merged)
}

pub fn submit(args: &SubmitArgs) -> ExitCode {
    let code = run("submit", async {
        let share_name = args
            .share
            .clone()
            .ok_or_else(|| usage("--share is required (on the command line or a #TRANCHE line)"))?;
        let gpus = gpus_per_node(args.gpus, args.gpus_per_node, args.nodes).map_err(usage)?;
        let (client, me) = connect(&args.config)?;
        timing::mark("client");
        if timing::on() {
            // The handshake alone; the request below would open the connection anyway.
            let _ = client.connect().await;
            timing::mark("handshake");
        }
        // The share's defaults (queue, unit) are left to the controller, which fills
        // them in from the state it has applied (on the leader, where the leader cache
        // sends this CLI, every acknowledged write). The state machine checks the
        // submit against the current share whatever that view was, so a stale one can
        // only make it refuse; then (and with a controller that leaves them empty) the
        // objects are read linearizably and the submit is made again with what they
        // say.
        let mut spec = build_spec(
            args,
            args.queue.as_deref().unwrap_or(""),
            &share_name,
            &me,
            args.unit.as_deref().unwrap_or(""),
            gpus,
        )?;
        // One token for every attempt at this submit: the client's retries, and a
        // second submit after a refusal (which changed nothing).
        spec.client_token = Some(tranche_client::new_token());
        // Meanwhile, on the same connection: which controller leads, for the next
        // command's cache.
        let (submitted, ()) = tokio::join!(client.submit(spec.clone()), remember_leader(&client));
        timing::mark("submit");
        let job = match submitted {
            Ok((job, _)) => job,
            Err(ClientError::Api(ApiError::Rejected(e))) => {
                let fresh = read_objects(&client).await?;
                let mut again = spec_from(args, &fresh, &share_name, gpus, &me)?;
                again.client_token = spec.client_token.clone();
                if again == spec {
                    return Err(failed(ClientError::Api(ApiError::Rejected(e))));
                }
                client.submit(again).await.map_err(failed)?.0
            }
            Err(e) => return Err(failed(e)),
        };
        let tasks = spec.array.as_ref().map(|a| a.indices());
        if args.parsable {
            println!("{job}");
        } else {
            match &tasks {
                Some(t) => println!(
                    "Submitted array job {job} with {} task(s) ({job}_{} to {job}_{})",
                    t.len(),
                    t.first().copied().unwrap_or(0),
                    t.last().copied().unwrap_or(0)
                ),
                None => println!("Submitted job {job}"),
            }
        }
        let r = match (args.wait, &tasks) {
            (false, _) => Ok(()),
            (true, None) => wait_for_end(&client, job, !args.parsable).await,
            (true, Some(_)) => wait_for_array(&client, job, !args.parsable).await,
        };
        client.close().await;
        r
    });
    timing::mark("exit");
    code
}

/// GPUs on each node: `--gpus-per-node`, or `--gpus` (the job's total, as Slurm
/// reads it) split evenly over `--nodes` ([`tranche_model::gpus_per_node`]).
pub fn gpus_per_node(gpus: Option<u32>, per_node: Option<u32>, nodes: u32) -> Result<u32, String> {
    const FIELDS: tranche_model::GpuFields = tranche_model::GpuFields {
        total: "--gpus",
        per_node: "--gpus-per-node",
        nodes: "--nodes",
    };
    tranche_model::gpus_per_node(gpus, per_node, nodes).map_err(|e| match e {
        tranche_model::GpuCount::Neither => format!(
            "{} (on the command line or a #TRANCHE line)",
            e.text(&FIELDS)
        ),
        e => e.text(&FIELDS),
    })
}

/// The objects, read linearizably.
async fn read_objects(client: &Client) -> Result<Objects, CliError> {
    match client.read(Query::Objects, false).await.map_err(failed)? {
        Response::Objects(o) => Ok(o),
        other => Err(unexpected(&other)),
    }
}

/// The job `args` describe, with its queue and unit defaulted from its share in
/// `objs`.
fn spec_from(
    args: &SubmitArgs,
    objs: &Objects,
    share_name: &str,
    gpus: u32,
    me: &str,
) -> Result<JobSpec, CliError> {
    let share = objs
        .shares
        .iter()
        .find(|s| s.name.as_str() == share_name)
        .ok_or_else(|| CliError::NotFound(format!("--share {share_name}: no such share")))?;
    let unit = match &args.unit {
        Some(u) => u.clone(),
        None => share
            .capacity_limits
            .first()
            .map(|l| l.unit.to_string())
            .ok_or_else(|| usage("--unit: the share names no unit; give one"))?,
    };
    build_spec(
        args,
        args.queue.as_deref().unwrap_or(share.queue.as_str()),
        share_name,
        me,
        &unit,
        gpus,
    )
}

/// The job `args` describe, in this queue and unit (empty: the share's, filled in by
/// the controller).
fn build_spec(
    args: &SubmitArgs,
    queue: &str,
    share_name: &str,
    me: &str,
    unit: &str,
    gpus: u32,
) -> Result<JobSpec, CliError> {
    let mut spec = JobSpec::new(&args.name, queue, share_name, me, unit, gpus, args.nodes);
    spec.priority = args.priority;
    spec.image = args.image.clone();
    spec.command = args.command.clone();
    spec.preemption_retries = args.preemption_retries;
    spec.cwd = working_dir(args.chdir.as_deref())?;
    if let Some(t) = &args.time {
        spec.time_limit_s = Some(parse_duration(t)?);
    }
    if let Some(sig) = &args.signal {
        let (name, grace) = match sig.split_once('@') {
            Some((n, g)) => (
                n,
                Some(parse_duration(g).map_err(|_| {
                    usage(format!("--signal `{sig}`: use SIG@GRACE, e.g. SIGUSR1@120"))
                })?),
            ),
            None => (sig.as_str(), None),
        };
        spec.checkpoint = Checkpoint {
            signal: name.to_string(),
            grace_s: grace,
            every_s: None,
        };
    }
    if let Some(c) = &args.checkpoint_every {
        spec.checkpoint.every_s = Some(parse_duration(c).map_err(|_| {
            usage(format!(
                "--checkpoint-every `{c}`: use a duration such as 30m, 2h or 1800"
            ))
        })?);
    }
    let mut env = BTreeMap::new();
    for kv in &args.env {
        let (k, v) = kv
            .split_once('=')
            .ok_or_else(|| usage(format!("--env `{kv}`: must be KEY=VALUE")))?;
        env.insert(k.to_string(), v.to_string());
    }
    spec.env = env;
    if let Some(a) = &args.array {
        spec.array = Some(
            tranche_model::ArraySpec::parse(a)
                .map_err(|e| usage(format!("--array {a}: {}", e.rule)))?,
        );
    }
    if let Some(d) = &args.dependency {
        spec.dependency = tranche_model::Dependency::parse(d)
            .map_err(|e| usage(format!("--dependency {d}: {}", e.rule)))?;
    }
    spec.hold = args.hold;
    spec.output = args.output.clone();
    spec.error = args.error.clone();
    spec.cpus_per_node = args.cpus_per_node.unwrap_or(0);
    if let Some(m) = &args.mem {
        spec.memory_mb_per_node = parse_mem(m)?;
    }
    Ok(spec)
}

/// Follows a job to its end, printing each new state; the job's own exit code becomes
/// this command's (1 for a job that failed without one, or was cancelled).
async fn wait_for_end(client: &Client, job: JobId, verbose: bool) -> Result<(), CliError> {
    let mut last = None;
    loop {
        let j = match client
            .read(Query::Job(JobRef::job(job)), false)
            .await
            .map_err(failed)?
        {
            Response::Job(j) => j,
            other => return Err(unexpected(&other)),
        };
        if last != Some(j.status) {
            if verbose {
                eprintln!("job {job}: {}", j.status.as_str());
            }
            last = Some(j.status);
        }
        if j.status.is_terminal() {
            let code = j.attempts.last().and_then(|a| match &a.end {
                Some(tranche_model::AttemptEnd::Exited { code }) => Some(*code),
                Some(tranche_model::AttemptEnd::Stopped { code, .. }) => *code,
                _ => None,
            });
            return match (j.status, code) {
                (JobStatus::Succeeded, _) => Ok(()),
                (_, Some(c)) if c > 0 && c < 256 => Err(CliError::JobFailed {
                    code: c as u8,
                    text: format!("job {job} {} with exit code {c}", j.status.as_str()),
                }),
                _ => Err(CliError::JobFailed {
                    code: 1,
                    text: format!("job {job} {}", j.status.as_str()),
                }),
            };
        }
        tokio::time::sleep(std::time::Duration::from_millis(250)).await;
    }
}

/// Follows every task of an array to its end: 0 when all succeeded, else the highest
/// exit code of a task (1 for a task that ended without one), as `sbatch --wait` does.
async fn wait_for_array(client: &Client, array: JobId, verbose: bool) -> Result<(), CliError> {
    let filter = JobFilter {
        array: Some(array),
        ..Default::default()
    };
    let mut last = None;
    loop {
        let tasks = match client
            .read(Query::Jobs(filter.clone()), false)
            .await
            .map_err(failed)?
        {
            Response::Jobs(t) => t,
            other => return Err(unexpected(&other)),
        };
        let ended = tasks.iter().filter(|t| t.status.is_terminal()).count();
        if verbose && last != Some(ended) {
            eprintln!("array {array}: {ended} of {} task(s) ended", tasks.len());
            last = Some(ended);
        }
        if ended == tasks.len() {
            let bad: Vec<_> = tasks
                .iter()
                .filter(|t| t.status != JobStatus::Succeeded)
                .collect();
            if bad.is_empty() {
                return Ok(());
            }
            let mut code = 1u8;
            for t in &bad {
                if let Response::Job(j) = client
                    .read(Query::Job(t.job_ref()), false)
                    .await
                    .map_err(failed)?
                {
                    if let Some(tranche_model::AttemptEnd::Exited { code: c }) =
                        j.attempts.last().and_then(|a| a.end.clone())
                    {
                        if (1..256).contains(&c) {
                            code = code.max(c as u8);
                        }
                    }
                }
            }
            return Err(CliError::JobFailed {
                code,
                text: format!(
                    "array {array}: {} of {} task(s) did not succeed",
                    bad.len(),
                    tasks.len()
                ),
            });
        }
        tokio::time::sleep(std::time::Duration::from_millis(250)).await;
    }
}

#[cfg(test)]
mod tests {
    use super::{directives, gpus_per_node};

    #[test]
    fn gpus_are_the_jobs_total_as_in_slurm() {
        assert_eq!(gpus_per_node(Some(8), None, 1), Ok(8));
        assert_eq!(gpus_per_node(Some(16), None, 2), Ok(8));
        assert_eq!(gpus_per_node(None, Some(8), 2), Ok(8));
        assert_eq!(
            gpus_per_node(Some(10), None, 4).unwrap_err(),
            "--gpus 10 does not split evenly over --nodes 4: give a multiple of 4, or \
             --gpus-per-node"
        );
        let both = gpus_per_node(Some(8), Some(4), 2).unwrap_err();
        assert!(both.contains("--gpus 8 and --gpus-per-node 4"), "{both}");
        let none = gpus_per_node(None, None, 1).unwrap_err();
        assert!(none.contains("--gpus-per-node is required"), "{none}");
    }

    #[test]
    fn directives_stop_at_the_first_command() {
        let script = "#!/bin/sh\n#TRANCHE --share vision --gpus 8\n# a comment\n\n#TRANCHE --time 4h\npython train.py\n#TRANCHE --gpus 1\n";
        assert_eq!(
            directives(script),
            ["--share", "vision", "--gpus", "8", "--time", "4h"]
        );
    }
}
