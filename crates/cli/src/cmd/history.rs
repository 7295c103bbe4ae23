//! `tranche jobs --history`: ended jobs, newest end first, as sacct lists them: those
//! still in the controllers' state and those that have left it for the history store.
//! Pages are fetched up to `--limit`; when more remain, the command says how to get
//! them (`--before CURSOR`).

use tranche_client::Client;
use tranche_model::{Job, JobId};
use tranche_proto::{parse_ended_states, EndedJob, HistoryCursor, HistoryFilter, MAX_HISTORY_PAGE};

use crate::exit::{failed, usage, CliError};
use crate::text::{clock_duration, fit, local_time, now_ms};

/// What `--since` is when not given: a day back from now.
pub const DEFAULT_SINCE: &str = "1d";
/// What `--limit` is when not given.
pub const DEFAULT_LIMIT: u32 = 100;
/// The most jobs one command lists.
pub const MAX_LIMIT: u32 = 100_000;

/// The options of `tranche jobs` that the history reads.
pub struct HistoryArgs<'a> {
    pub since: Option<&'a str>,
    pub user: Option<String>,
    pub share: Option<&'a str>,
    pub states: &'a [String],
    pub limit: Option<u32>,
    pub before: Option<&'a str>,
    pub json: bool,
}

/// The filter `args` describe, as of `now`.
pub fn filter(args: &HistoryArgs, now: u64) -> Result<(HistoryFilter, u32), CliError> {
    let since_text = args.since.unwrap_or(DEFAULT_SINCE);
    let since = crate::parse::parse_when(since_text, now).map_err(|e| e.for_option("--since"))?;
    let mut status = Vec::new();
    for s in args.states {
        for st in parse_ended_states(s).map_err(|e| usage(format!("--state {s}: {e}")))? {
            if !status.contains(&st) {
                status.push(st);
            }
        }
    }
    let limit = args.limit.unwrap_or(DEFAULT_LIMIT);
    if !(1..=MAX_LIMIT).contains(&limit) {
        return Err(usage(format!("--limit {limit}: must be 1 to {MAX_LIMIT}")));
    }
    let before = match args.before {
        Some(b) => Some(HistoryCursor::parse(b).map_err(|e| usage(format!("--before: {e}")))?),
        None => None,
    };
    let f = HistoryFilter {
        since: Some(since),
        user: args.user.as_deref().map(Into::into),
        share: args.share.map(Into::into),
        status,
        limit: 0,
        before,
    };
    Ok((f, limit))
}

/// Up to `limit` ended jobs, newest end first, fetched a page at a time; and where the
/// next would start, when more remain.
pub async fn fetch(
    client: &Client,
    mut f: HistoryFilter,
    limit: u32,
) -> Result<(Vec<EndedJob>, Option<HistoryCursor>), CliError> {
    let mut out: Vec<EndedJob> = Vec::new();
    loop {
        f.limit = (limit - out.len() as u32).min(MAX_HISTORY_PAGE);
        let page = client.history(f.clone()).await.map_err(failed)?;
        out.extend(page.jobs);
        match page.next {
            Some(n) if (out.len() as u32) < limit => f.before = Some(n),
            next => return Ok((out, next)),
        }
    }
}

/// How long a job's last attempt ran, as squeue's TIME column writes it.
fn elapsed(e: &EndedJob) -> String {
    e.job
        .started_at
        .map(|s| clock_duration(e.ended_at.saturating_sub(s)))
        .unwrap_or_else(|| "0:00".into())
}

/// An exit code as a cell: the code, `signal` for a process a signal killed, `-` for
/// none (it never ran, or its node was lost).
fn exit_text(code: Option<i32>) -> String {
    match code {
        Some(c) if c >= 0 => c.to_string(),
        Some(_) => "signal".into(),
        None => "-".into(),
    }
}

/// The table: a header, then a line per job.
pub fn table(jobs: &[EndedJob]) -> Vec<String> {
    let row = |c: [String; 8]| {
        format!(
            "{:>14} {:<12} {:<9} {:<10} {:<9} {:<19} {:>10} {:>6}",
            c[0],
            fit(c[1].clone(), 12),
            fit(c[2].clone(), 9),
            fit(c[3].clone(), 10),
            c[4],
            c[5],
            c[6],
            c[7]
        )
        .trim_end()
        .to_string()
    };
    let mut out = vec![row([
        "JOBID", "NAME", "USER", "SHARE", "STATE", "ENDED", "ELAPSED", "EXIT",
    ]
    .map(String::from))];
    for e in jobs {
        let j = &e.job;
        out.push(row([
            j.job_ref().to_string(),
            j.name.clone(),
            j.user.to_string(),
            j.share.to_string(),
            j.status.as_str().to_string(),
            local_time(e.ended_at),
            elapsed(e),
            exit_text(e.exit_code),
        ]));
    }
    out
}

/// The records `--json` prints.
pub fn json(jobs: &[EndedJob]) -> serde_json::Value {
    jobs.iter()
        .map(|e| {
            let j = &e.job;
            serde_json::json!({
                "id": j.id.0, "job": j.job_ref().to_string(),
                "array_job_id": j.array.as_ref().map(|a| a.array.0),
                "array_task_id": j.array.as_ref().map(|a| a.index),
                "name": j.name, "queue": j.queue.as_str(), "share": j.share.as_str(),
                "user": j.user.as_str(), "state": j.status.as_str(),
                "unit": j.unit.as_str(), "gpus": j.gpus,
                "nodes": j.nodes.iter().map(|n| n.as_str()).collect::<Vec<_>>(),
                "submitted_at": j.submitted_at, "started_at": j.started_at,
                "ended_at": e.ended_at,
                "elapsed_ms": j.started_at.map(|s| e.ended_at.saturating_sub(s)),
                "exit_code": e.exit_code, "reason": e.reason, "archived": e.archived,
            })
        })
        .collect()
}

/// `tranche jobs --history`.
pub async fn list(client: &Client, args: &HistoryArgs<'_>) -> Result<(), CliError> {
    let (f, limit) = filter(args, now_ms())?;
    let (jobs, next) = fetch(client, f, limit).await?;
    if args.json {
        println!("{}", json(&jobs));
    } else {
        for line in table(&jobs) {
            println!("{line}");
        }
    }
    if let Some(n) = next {
        eprintln!(
            "{} job(s) listed; more ended before them: add --before {} for the next ones.",
            jobs.len(),
            n.text()
        );
    }
    Ok(())
}

/// Whether `job` (an ended one) has left the controllers' state: the history lists it
/// as archived. `None` when the history does not list it (it may have been dropped
/// from the store since).
pub async fn archived(client: &Client, job: &Job) -> Result<Option<bool>, CliError> {
    if !job.status.is_terminal() {
        return Ok(Some(false));
    }
    let at = tranche_state::retention::ended_at(job);
    // The page that starts just after this job's own place in the history.
    let f = HistoryFilter {
        since: Some(at),
        user: Some(job.spec.user.clone()),
        share: Some(job.spec.share.clone()),
        status: vec![job.status],
        limit: 1,
        before: Some(HistoryCursor {
            ended_at: at,
            id: JobId(job.id.0 + 1),
        }),
    };
    let page = client.history(f).await.map_err(failed)?;
    Ok(page
        .jobs
        .first()
        .filter(|e| e.job.id == job.id)
        .map(|e| e.archived))
}

#[cfg(test)]
mod tests {
    use super::*;
    use tranche_model::JobStatus;

    fn args<'a>(states: &'a [String]) -> HistoryArgs<'a> {
        HistoryArgs {
            since: Some("7d"),
            user: None,
            share: None,
            states,
            limit: None,
            before: None,
            json: false,
        }
    }

    #[test]
    fn filters_read_since_states_limit_and_cursor() {
        let now = 10 * 86_400_000;
        let states = vec!["SUCCEEDED,failed".to_string(), "FAILED".to_string()];
        let (f, limit) = filter(&args(&states), now).unwrap();
        assert_eq!(f.since, Some(3 * 86_400_000));
        assert_eq!(f.status, vec![JobStatus::Succeeded, JobStatus::Failed]);
        assert_eq!(limit, DEFAULT_LIMIT);
        let mut a = args(&[]);
        a.before = Some("900.42");
        let (f, _) = filter(&a, now).unwrap();
        assert_eq!(
            f.before,
            Some(HistoryCursor {
                ended_at: 900,
                id: JobId(42)
            })
        );
    }

    #[test]
    fn bad_options_name_the_option_and_the_rule() {
        let running = vec!["RUNNING".to_string()];
        let e = filter(&args(&running), 0).unwrap_err();
        let (code, m) = (e.code(), e.to_string());
        assert_eq!(code, 2);
        assert!(
            m.starts_with("--state RUNNING: RUNNING has not ended"),
            "{m}"
        );
        let mut a = args(&[]);
        a.limit = Some(0);
        let m = filter(&a, 0).unwrap_err().to_string();
        assert!(m.contains("--limit 0: must be 1 to 100000"), "{m}");
        let mut a = args(&[]);
        a.since = Some("yesterday");
        assert!(filter(&a, 0)
            .unwrap_err()
            .to_string()
            .starts_with("--since `yesterday`"));
        let mut a = args(&[]);
        a.before = Some("42");
        assert!(filter(&a, 0)
            .unwrap_err()
            .to_string()
            .contains("<ended_at>.<id>"));
    }

    #[test]
    fn exit_codes_and_run_times_read_as_people_read_them() {
        assert_eq!(exit_text(Some(0)), "0");
        assert_eq!(exit_text(Some(3)), "3");
        assert_eq!(exit_text(Some(-1)), "signal");
        assert_eq!(exit_text(None), "-");
    }
}
