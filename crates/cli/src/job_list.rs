//! `tranche jobs`' rows: one per job, with the waiting tasks of an array folded into
//! one row (`42_[8-999%50]`, as squeue shows them), and the columns `--format` names.

use tranche_model::{fold_indices, JobStatus, Millis};
use tranche_proto::JobSummary;

use crate::text::{clock_duration, fit, local_time, state_code};

/// One row: a job, or the waiting tasks of one array in one state.
pub struct Row<'a> {
    pub id: String,
    /// The first job of the row (for a folded row, its lowest task).
    pub job: &'a JobSummary,
}

/// Jobs in id order, each waiting run of an array's tasks in the same state folded.
pub fn rows(jobs: &[JobSummary]) -> Vec<Row<'_>> {
    let waiting = |j: &JobSummary| matches!(j.status, JobStatus::Pending | JobStatus::Runnable);
    let mut out: Vec<Row> = vec![];
    let mut i = 0;
    while i < jobs.len() {
        let j = &jobs[i];
        let Some(a) = j.array.as_ref().filter(|_| waiting(j)) else {
            out.push(Row {
                id: j.job_ref().to_string(),
                job: j,
            });
            i += 1;
            continue;
        };
        let mut indices = vec![a.index];
        let mut k = i + 1;
        while let Some(n) = jobs.get(k) {
            match &n.array {
                Some(b) if b.array == a.array && n.status == j.status => indices.push(b.index),
                _ => break,
            }
            k += 1;
        }
        let id = if indices.len() == 1 {
            j.job_ref().to_string()
        } else {
            let limit = a.max_running.map(|m| format!("%{m}")).unwrap_or_default();
            format!("{}_[{}{limit}]", a.array, fold_indices(&indices))
        };
        out.push(Row { id, job: j });
        i = k;
    }
    out
}

/// The columns `--format` may name, with their headers and widths (0: the rest of the
/// line, only last).
pub const COLUMNS: &[(&str, &str, usize)] = &[
    ("id", "JOBID", 14),
    ("name", "NAME", 12),
    ("queue", "QUEUE", 9),
    ("share", "SHARE", 10),
    ("user", "USER", 9),
    ("st", "ST", 2),
    ("state", "STATE", 9),
    ("priority", "PRIO", 5),
    ("time", "TIME", 10),
    ("gpus", "GPUS", 5),
    ("unit", "UNIT", 6),
    ("submitted", "SUBMITTED", 19),
    ("preemptions", "PREEMPT", 7),
    ("nodes", "NODES", 20),
    ("pos", "POS", 9),
    ("start", "START", 19),
    ("reason", "REASON", 0),
    ("where", "NODES(REASON)", 0),
];

/// The default columns, as squeue's.
pub const DEFAULT_FORMAT: &str = "id,queue,share,name,user,st,time,gpus,where";
/// `--long`: with each waiting job's position in its share and estimated start.
pub const LONG_FORMAT: &str = "id,share,name,user,st,priority,gpus,pos,start,where";

/// Checks a `--format` list: comma-separated column names.
pub fn parse_format(f: &str) -> Result<Vec<&'static (&'static str, &'static str, usize)>, String> {
    f.split(',')
        .map(str::trim)
        .map(|name| {
            COLUMNS
                .iter()
                .find(|c| c.0.eq_ignore_ascii_case(name))
                .ok_or_else(|| {
                    let all: Vec<&str> = COLUMNS.iter().map(|c| c.0).collect();
                    format!(
                        "--format: unknown column `{name}`; columns are {}",
                        all.join(", ")
                    )
                })
        })
        .collect()
}

fn cell(col: &str, r: &Row, now: Millis) -> String {
    let j = r.job;
    let nodes = || {
        j.nodes
            .iter()
            .map(|n| n.as_str())
            .collect::<Vec<_>>()
            .join(",")
    };
    match col {
        "id" => r.id.clone(),
        "name" => j.name.clone(),
        "queue" => j.queue.to_string(),
        "share" => j.share.to_string(),
        "user" => j.user.to_string(),
        "st" => state_code(j.status).into(),
        "state" => j.status.as_str().into(),
        "priority" => j.priority.to_string(),
        "time" => j
            .started_at
            .map(|t| clock_duration(now.saturating_sub(t)))
            .unwrap_or_else(|| "0:00".into()),
        "gpus" => j.gpus.to_string(),
        "unit" => j.unit.to_string(),
        "submitted" => local_time(j.submitted_at),
        "preemptions" => j.preemptions.to_string(),
        "nodes" => nodes(),
        "reason" => j.reason.clone().unwrap_or_default(),
        "pos" => j
            .standing
            .as_ref()
            .map(|s| format!("{}/{}", s.in_share, s.share_waiting))
            .unwrap_or_default(),
        "start" => j
            .standing
            .as_ref()
            .map(|s| estimate_text(&s.start))
            .unwrap_or_default(),
        _ => {
            if j.nodes.is_empty() {
                j.reason
                    .as_ref()
                    .map(|r| format!("({r})"))
                    .unwrap_or_default()
            } else {
                nodes()
            }
        }
    }
}

/// An estimated start as people read it.
pub fn estimate_text(e: &tranche_model::Estimate) -> String {
    match e {
        tranche_model::Estimate::Now => "now".into(),
        tranche_model::Estimate::At(t) => local_time(*t),
        tranche_model::Estimate::Unknown => "unknown".into(),
    }
}

/// The table: a header, then a line per row. Numbers are right-aligned.
pub fn table(
    rows: &[Row],
    cols: &[&(&str, &str, usize)],
    now: Millis,
    line_width: usize,
) -> Vec<String> {
    let numeric = |c: &str| matches!(c, "priority" | "time" | "gpus" | "preemptions");
    let fixed: usize = cols.iter().map(|c| c.2 + 1).sum();
    let render = |cells: Vec<String>| {
        let mut line = String::new();
        for (i, (c, v)) in cols.iter().zip(cells).enumerate() {
            if i > 0 {
                line.push(' ');
            }
            let w = c.2;
            if w == 0 {
                line.push_str(&fit(v, line_width.saturating_sub(fixed).max(20)));
            } else if numeric(c.0) {
                line.push_str(&format!("{v:>w$.w$}"));
            } else if c.0 == "id" {
                // Ids are never cut: an id that is longer widens its row.
                line.push_str(&format!("{v:>w$}"));
            } else {
                line.push_str(&format!("{v:<w$.w$}"));
            }
        }
        line.trim_end().to_string()
    };
    let mut out = vec![render(cols.iter().map(|c| c.1.to_string()).collect())];
    for r in rows {
        out.push(render(cols.iter().map(|c| cell(c.0, r, now)).collect()));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use tranche_model::{ArrayTask, JobId};

    fn job(id: u64, status: JobStatus, array: Option<(u64, u32)>) -> JobSummary {
        JobSummary {
            id: JobId(id),
            name: "sweep".into(),
            queue: "q".into(),
            share: "nlp".into(),
            user: "alice".into(),
            status,
            priority: 0,
            unit: "h100".into(),
            gpus: 1,
            nodes: vec![],
            submitted_at: 0,
            started_at: None,
            reason: Some("waiting".into()),
            preemptions: 0,
            client_token: None,
            array: array.map(|(a, index)| ArrayTask {
                array: JobId(a),
                index,
                count: 1000,
                max_running: Some(50),
            }),
            standing: None,
        }
    }

    #[test]
    fn waiting_tasks_of_an_array_fold_into_one_row() {
        let mut jobs = vec![job(41, JobStatus::Running, None)];
        jobs.push(job(42, JobStatus::Running, Some((42, 0))));
        for i in 1..8 {
            jobs.push(job(42 + i, JobStatus::Runnable, Some((42, i as u32))));
        }
        jobs.push(job(50, JobStatus::Pending, Some((42, 9))));
        jobs.push(job(51, JobStatus::Runnable, None));
        let ids: Vec<String> = rows(&jobs).into_iter().map(|r| r.id).collect();
        assert_eq!(ids, ["41", "42_0", "42_[1-7%50]", "42_9", "51"]);
    }

    #[test]
    fn formats_name_columns_and_refuse_unknown_ones() {
        let cols = parse_format("id,state,reason").unwrap();
        let jobs = vec![job(7, JobStatus::Runnable, None)];
        let lines = table(&rows(&jobs), &cols, 0, 100);
        assert_eq!(
            lines[0].split_whitespace().collect::<Vec<_>>(),
            ["JOBID", "STATE", "REASON"]
        );
        assert_eq!(
            lines[1].split_whitespace().collect::<Vec<_>>(),
            ["7", "RUNNABLE", "waiting"]
        );
        let e = parse_format("id,color").unwrap_err();
        assert!(
            e.contains("unknown column `color`") && e.contains("reason"),
            "{e}"
        );
    }
}
