//! `tranche report`: the accounting ledger as sreport shows it, in GPU-hours with
//! percentages of the unit's capacity over the range.

use std::path::PathBuf;
use std::process::ExitCode;

use tranche_proto::{LedgerReport, Query, Response};
use tranche_state::ledger::{Totals, HOUR_MS};

use crate::client_cfg::connect;
use crate::fmt::{local_time, now_ms};
use crate::output::{failed, run, unexpected, usage, Fail};

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

/// `2026-11-01`, `2026-11-01T08:00[:00]` (local time), or `7d`, `24h`, `90m` before now.
pub fn parse_when(s: &str, now: u64) -> Result<u64, String> {
    let bad = || {
        format!("`{s}`: use a local date or time (2026-11-01, 2026-11-01T08:00) or a span back from now (7d, 24h, 90m)")
    };
    let t = s.trim();
    if let Some((n, unit)) = t.char_indices().last().map(|(i, c)| (&t[..i], c)) {
        if unit.is_ascii_alphabetic() && !n.contains('-') {
            let n: u64 = n.parse().map_err(|_| bad())?;
            let ms = match unit {
                'd' => 86_400_000,
                'h' => 3_600_000,
                'm' => 60_000,
                _ => return Err(bad()),
            };
            return Ok(now.saturating_sub(n * ms));
        }
    }
    let (date, time) = t.split_once(['T', ' ']).unwrap_or((t, "00:00"));
    let d: Vec<i32> = date
        .split('-')
        .map(|p| p.parse().map_err(|_| bad()))
        .collect::<Result<_, _>>()?;
    let h: Vec<i32> = time
        .split(':')
        .map(|p| p.parse().map_err(|_| bad()))
        .collect::<Result<_, _>>()?;
    let [y, mo, day] = <[i32; 3]>::try_from(d).map_err(|_| bad())?;
    let (hh, mm, ss) = match h[..] {
        [hh, mm] => (hh, mm, 0),
        [hh, mm, ss] => (hh, mm, ss),
        _ => return Err(bad()),
    };
    if !(1..=12).contains(&mo)
        || !(1..=31).contains(&day)
        || !(0..24).contains(&hh)
        || !(0..60).contains(&mm)
        || !(0..61).contains(&ss)
    {
        return Err(bad());
    }
    // SAFETY: a zeroed `tm` is a valid value of the plain C struct; `mktime` reads and
    // normalizes it in place, and it lives for the call.
    let mut tm: libc::tm = unsafe { std::mem::zeroed() };
    tm.tm_year = y - 1900;
    tm.tm_mon = mo - 1;
    tm.tm_mday = day;
    tm.tm_hour = hh;
    tm.tm_min = mm;
    tm.tm_sec = ss;
    tm.tm_isdst = -1;
    let secs = unsafe { libc::mktime(&mut tm) };
    if secs < 0 {
        return Err(bad());
    }
    Ok(secs as u64 * 1000)
}

fn gpu_h(ms: u64) -> f64 {
    ms as f64 / HOUR_MS as f64
}

/// One row: its key (share or user, and unit; or the unit alone) and its totals.
struct Row {
    key: Vec<String>,
    unit: String,
    t: Totals,
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
        "{head} {:>16} {:>16} {:>16} {:>16} {:>16}",
        "USED", "BORROWED", "LENT", "RESERVED IDLE", "LOST (PREEMPTED)"
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
            "{key} {} {} {} {} {}",
            cell(row.t.used),
            cell(row.t.borrowed),
            cell(row.t.lent),
            cell(row.t.reserved_idle),
            cell(row.t.lost())
        ));
    }
    out
}

pub fn report(args: &ReportArgs) -> ExitCode {
    run("report", async {
        let now = now_ms();
        let from = match &args.since {
            Some(s) => parse_when(s, now).map_err(|e| usage(format!("--since {e}")))?,
            None => 0,
        };
        let to = match &args.until {
            Some(s) => Some(parse_when(s, now).map_err(|e| usage(format!("--until {e}")))?),
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
        Ok::<(), Fail>(())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spans_and_dates() {
        let now = 10 * 86_400_000;
        assert_eq!(parse_when("7d", now), Ok(3 * 86_400_000));
        assert_eq!(parse_when("24h", now), Ok(9 * 86_400_000));
        let a = parse_when("2026-11-01", now).unwrap();
        let b = parse_when("2026-11-01T08:30", now).unwrap();
        assert_eq!(b - a, (8 * 60 + 30) * 60_000);
        for bad in ["yesterday", "2026-13-01", "2026-11-01T25:00", "5x"] {
            assert!(parse_when(bad, now).unwrap_err().contains(bad), "{bad}");
        }
    }
}
