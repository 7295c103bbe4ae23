//! `tranche report`: the accounting ledger as sreport shows it, in GPU-hours with
//! percentages of the unit's capacity over the range.

use std::path::PathBuf;
use std::process::ExitCode;

use tranche_proto::{GpuTimes, LedgerReport, Query, Response};
use tranche_state::ledger::HOUR_MS;

use crate::client_cfg::connect;
use crate::exit::{failed, run, unexpected, usage, CliError};
use crate::parse::parse_when;
use crate::text::{local_time, now_ms};

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum By {
    Share,
    User,
    Unit,
}

#[derive(clap::Args, Debug)]
pub struct ReportArgs {
    /// From: a local date or time (2026-11-01, 2026-11-01T08:00) or a span back from
    /// now (7d, 24h). Default: since the ledger began counting.
    #[arg(long)]
    since: Option<String>,
    /// Until: as --since. Default: now.
    #[arg(long)]
    until: Option<String>,
    /// One row per share and unit, per user and unit, or per unit.
    #[arg(long, value_enum, default_value = "share")]
    by: By,
    /// One JSON object instead of a table.
    #[arg(long)]
    json: bool,
    #[arg(long)]
    config: Option<PathBuf>,
}

fn gpu_h(ms: u64) -> f64 {
    ms as f64 / HOUR_MS as f64
}

/// One row: its key (share or user, and unit; or the unit alone) and its totals.
struct Row {
    key: Vec<String>,
    unit: String,
    t: GpuTimes,
}

fn rows(r: &LedgerReport, by: By) -> Vec<Row> {
    let b = &r.totals;
    match by {
        By::Share => b
            .shares
            .iter()
            .map(|((s, u), t)| Row {
                key: vec![s.to_string(), u.to_string()],
                unit: u.to_string(),
                t: *t,
            })
            .collect(),
        By::User => b
            .users
            .iter()
            .map(|((s, u), t)| Row {
                key: vec![s.to_string(), u.to_string()],
                unit: u.to_string(),
                t: *t,
            })
            .collect(),
        By::Unit => b
            .by_unit()
            .into_iter()
            .map(|(u, t)| Row {
                key: vec![u.to_string()],
                unit: u.to_string(),
                t,
            })
            .collect(),
    }
}

fn percent(part: u64, whole: u64) -> f64 {
    if whole == 0 {
        0.0
    } else {
        part as f64 * 100.0 / whole as f64
    }
}

/// The report as JSON: per row GPU-hours and percentages of the unit's capacity.
pub fn to_json(r: &LedgerReport, by: By) -> serde_json::Value {
    let cap = |u: &str| {
        r.totals
            .capacity
            .get(&tranche_model::Unit::from(u))
            .copied()
            .unwrap_or(0)
    };
    let keys: &[&str] = match by {
        By::Share => &["share", "unit"],
        By::User => &["user", "unit"],
        By::Unit => &["unit"],
    };
    let rows: Vec<serde_json::Value> = rows(r, by)
        .iter()
        .map(|row| {
            let mut o = serde_json::Map::new();
            for (k, v) in keys.iter().zip(&row.key) {
                o.insert(k.to_string(), v.clone().into());
            }
            let c = cap(&row.unit);
            let t = &row.t;
            let figures = [
                ("used", t.used),
                ("borrowed", t.borrowed),
                ("lent", t.lent),
                ("reserved_idle", t.reserved_idle),
                ("lost_reclaim", t.lost_reclaim),
                ("lost_in_share", t.lost_in_share),
                ("lost_drain", t.lost_drain),
                ("work_lost", t.work_lost),
            ];
            o.insert(
                "gpu_hours".into(),
                figures
                    .iter()
                    .map(|(k, v)| (k.to_string(), gpu_h(*v).into()))
                    .collect::<serde_json::Map<_, _>>()
                    .into(),
            );
            o.insert(
                "percent_of_capacity".into(),
                figures
                    .iter()
                    .map(|(k, v)| (k.to_string(), percent(*v, c).into()))
                    .collect::<serde_json::Map<_, _>>()
                    .into(),
            );
            o.into()
        })
        .collect();
    serde_json::json!({
        "from": r.from, "to": r.to, "counting_since": r.counting_since,
        "by": match by { By::Share => "share", By::User => "user", By::Unit => "unit" },
        "capacity_gpu_hours": r.totals.capacity.iter().map(|(u, v)| (u.to_string(), gpu_h(*v).into())).collect::<serde_json::Map<_, _>>(),
        "rows": rows,
    })
}

/// The report as a table.
pub fn to_text(r: &LedgerReport, by: By) -> Vec<String> {
    let mut out = vec![];
    let from = r.from.max(r.counting_since) / HOUR_MS * HOUR_MS;
    out.push(format!(
        "GPU-hours from {} to {} (whole hours; percentages of each unit's capacity)",
        local_time(from),
        local_time(r.to)
    ));
    if r.counting_since == 0 {
        out.push("nothing counted yet".into());
        return out;
    }
    for (u, c) in &r.totals.capacity {
        out.push(format!("capacity {u}: {:.1} GPU-hours", gpu_h(*c)));
    }
    let head = match by {
        By::Share => format!("{:<14} {:<6}", "SHARE", "UNIT"),
        By::User => format!("{:<14} {:<6}", "USER", "UNIT"),
        By::Unit => format!("{:<21}", "UNIT"),
    };
    out.push(format!(
        "{head} {:>16} {:>16} {:>16} {:>16} {:>16} {:>16}",
        "USED", "BORROWED", "LENT", "RESERVED IDLE", "PREEMPTED", "WORK LOST"
    ));
    for row in rows(r, by) {
        let c = r
            .totals
            .capacity
            .get(&tranche_model::Unit::from(row.unit.as_str()))
            .copied()
            .unwrap_or(0);
        let cell = |v: u64| format!("{:>8.1} {:>6}", gpu_h(v), format!("{:.1}%", percent(v, c)));
        let key = match by {
            By::Unit => format!("{:<21.21}", row.key[0]),
            _ => format!("{:<14.14} {:<6.6}", row.key[0], row.key[1]),
        };
        out.push(format!(
            "{key} {} {} {} {} {} {}",
            cell(row.t.used),
            cell(row.t.borrowed),
            cell(row.t.lent),
            cell(row.t.reserved_idle),
            cell(row.t.lost()),
            cell(row.t.work_lost)
        ));
    }
    out
}

pub fn report(args: &ReportArgs) -> ExitCode {
    run("report", async {
        let now = now_ms();
        let from = match &args.since {
            Some(s) => parse_when(s, now).map_err(|e| e.for_option("--since"))?,
            None => 0,
        };
        let to = match &args.until {
            Some(s) => Some(parse_when(s, now).map_err(|e| e.for_option("--until"))?),
            None => None,
        };
        if to.is_some_and(|t| t <= from) {
            return Err(usage("--until must be after --since"));
        }
        let (client, _) = connect(&args.config)?;
        let r = match client
            .read(Query::Report { from, to }, false)
            .await
            .map_err(failed)?
        {
            Response::Report(r) => r,
            other => return Err(unexpected(&other)),
        };
        if args.json {
            println!("{}", to_json(&r, args.by));
        } else {
            for l in to_text(&r, args.by) {
                println!("{l}");
            }
        }
        Ok::<(), CliError>(())
    })
}
