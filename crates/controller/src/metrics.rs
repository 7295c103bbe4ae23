//! Prometheus metrics on `metrics_addr` (`GET /metrics`, text exposition format):
//! what this controller reports, rendered at each scrape.

use std::fmt::Write;

use tranche_model::{AttemptEnd, StopKind};

use crate::mailbox::SharedRef;
use crate::views;

/// Renders every metric of this controller.
pub fn render(shared: &SharedRef) -> String {
    let sh = shared.read().unwrap();
    let now = crate::mailbox::wall_ms().max(sh.last_now);
    let mut out = String::new();
    let st = &sh.status;
    let mut g = |name: &str, help: &str, rows: Vec<(String, f64)>| {
        let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} gauge");
        for (labels, v) in rows {
            let _ = writeln!(out, "{name}{labels} {v}");
        }
    };
    g(
        "tranche_raft_term",
        "Current Raft term.",
        vec![(String::new(), st.term as f64)],
    );
    g(
        "tranche_raft_commit_index",
        "Raft commit index.",
        vec![(String::new(), st.commit as f64)],
    );
    g(
        "tranche_raft_applied_index",
        "Index applied to the state machine.",
        vec![(String::new(), st.applied as f64)],
    );
    g(
        "tranche_raft_apply_lag",
        "Committed entries not yet applied here.",
        vec![(String::new(), st.commit.saturating_sub(st.applied) as f64)],
    );
    g(
        "tranche_raft_is_leader",
        "1 on the leader.",
        vec![(
            String::new(),
            if st.leader == Some(st.id) { 1.0 } else { 0.0 },
        )],
    );
    g(
        "tranche_raft_member_lag",
        "Committed entries a member lacks (leader's view).",
        st.members
            .iter()
            .filter_map(|m| {
                m.lag
                    .map(|l| (format!("{{member=\"{}\"}}", m.member.name), l as f64))
            })
            .collect(),
    );
    g(
        "tranche_sched_pass_seconds",
        "CPU time of the latest scheduling pass (leader), from the scheduler taking the request to its answer.",
        vec![(String::new(), sh.last_pass.as_secs_f64())],
    );
    g(
        "tranche_state_jobs",
        "Jobs in the replicated state (ended jobs not yet moved to the history store included).",
        vec![(String::new(), sh.state.jobs.len() as f64)],
    );
    g(
        "tranche_state_ended_jobs",
        "Ended jobs still in the replicated state.",
        vec![(String::new(), sh.state.ended_count() as f64)],
    );
    g(
        "tranche_state_image_bytes",
        "Size of the latest state image this controller wrote or installed.",
        vec![(String::new(), sh.image_bytes as f64)],
    );
    let shares = views::shares(&sh.state, now);
    g(
        "tranche_share_waiting_jobs",
        "Jobs waiting in each share (queue depth).",
        shares
            .iter()
            .map(|s| (format!("{{share=\"{}\"}}", s.name), s.waiting as f64))
            .collect(),
    );
    g(
        "tranche_share_running_jobs",
        "Jobs holding GPUs in each share.",
        shares
            .iter()
            .map(|s| (format!("{{share=\"{}\"}}", s.name), s.running as f64))
            .collect(),
    );
    for (metric, help, pick) in [
        ("tranche_share_gpus_used", "GPUs a share uses, per unit.", 0),
        (
            "tranche_share_gpus_lent",
            "Of a share's idle GPUs, those others use.",
            1,
        ),
        (
            "tranche_share_gpus_borrowed",
            "GPUs a share uses beyond its max.",
            2,
        ),
        (
            "tranche_share_gpus_max",
            "A share's capacity limit, per unit.",
            3,
        ),
    ] {
        let mut rows = Vec::new();
        for s in &shares {
            for u in &s.units {
                let v = [u.used, u.lent, u.borrowed, u.max][pick];
                rows.push((
                    format!("{{share=\"{}\",unit=\"{}\"}}", s.name, u.unit),
                    v as f64,
                ));
            }
        }
        g(metric, help, rows);
    }
    let mut by_kind = [0u64; 4];
    for j in sh.state.jobs.values() {
        for a in &j.attempts {
            if let Some(AttemptEnd::Stopped { kind, .. }) = &a.end {
                let i = match kind {
                    StopKind::Reclaim { .. } => 0,
                    StopKind::InShare { .. } => 1,
                    StopKind::Cancel => 2,
                    StopKind::Drain => 3,
                };
                by_kind[i] += 1;
            }
        }
    }
    let _ = writeln!(
        out,
        "# HELP tranche_stops_total Attempts stopped, by kind.\n# TYPE tranche_stops_total counter"
    );
    for (i, k) in ["reclaim", "in_share", "cancel", "drain"]
        .iter()
        .enumerate()
    {
        let _ = writeln!(out, "tranche_stops_total{{kind=\"{k}\"}} {}", by_kind[i]);
    }
    // The ledger's totals since it began (design §9), in GPU-seconds.
    let all = sh.state.ledger_all_time(now);
    let kinds = |t: &tranche_state::ledger::Totals| {
        [
            ("used", t.used),
            ("borrowed", t.borrowed),
            ("lent", t.lent),
            ("reserved_idle", t.reserved_idle),
            ("lost_reclaim", t.lost_reclaim),
            ("lost_in_share", t.lost_in_share),
            ("lost_drain", t.lost_drain),
        ]
    };
    let _ = writeln!(
        out,
        "# HELP tranche_share_gpu_seconds_total GPU time per share and unit: used within max, borrowed, lent, kept idle by RESERVE, lost to preemption.
# TYPE tranche_share_gpu_seconds_total counter"
    );
    for ((s, u), t) in &all.shares {
        for (k, v) in kinds(t) {
            let _ = writeln!(
                out,
                "tranche_share_gpu_seconds_total{{share=\"{s}\",unit=\"{u}\",kind=\"{k}\"}} {}",
                v as f64 / 1000.0
            );
        }
    }
    let _ = writeln!(
        out,
        "# HELP tranche_share_gpu_work_lost_seconds_total Of the GPU time lost to preemption, the work since each attempt's last checkpoint.
# TYPE tranche_share_gpu_work_lost_seconds_total counter"
    );
    for ((s, u), t) in &all.shares {
        let _ = writeln!(
            out,
            "tranche_share_gpu_work_lost_seconds_total{{share=\"{s}\",unit=\"{u}\"}} {}",
            t.work_lost as f64 / 1000.0
        );
    }
    let _ = writeln!(
        out,
        "# HELP tranche_user_gpu_seconds_total GPU time per user and unit: used within max, borrowed, lost to preemption.
# TYPE tranche_user_gpu_seconds_total counter"
    );
    for ((user, u), t) in &all.users {
        for (k, v) in kinds(t) {
            if matches!(k, "lent" | "reserved_idle") {
                continue;
            }
            let _ = writeln!(
                out,
                "tranche_user_gpu_seconds_total{{user=\"{user}\",unit=\"{u}\",kind=\"{k}\"}} {}",
                v as f64 / 1000.0
            );
        }
    }
    let _ = writeln!(
        out,
        "# HELP tranche_capacity_gpu_seconds_total GPU time of the nodes that were not DOWN, per unit.
# TYPE tranche_capacity_gpu_seconds_total counter"
    );
    for (u, v) in &all.capacity {
        let _ = writeln!(
            out,
            "tranche_capacity_gpu_seconds_total{{unit=\"{u}\"}} {}",
            *v as f64 / 1000.0
        );
    }
    // Counters: `rate(busy) / rate(passes)` is the mean pass, and `rate(busy)` the
    // share of time that the busy cap (`max_busy_percent`) bounds.
    let _ = writeln!(
        out,
        "# HELP tranche_sched_passes_total Scheduling passes run on this controller.\n# TYPE tranche_sched_passes_total counter\ntranche_sched_passes_total {}",
        sh.passes
    );
    let _ = writeln!(
        out,
        "# HELP tranche_sched_busy_seconds_total CPU time the scheduler spent on passes, counted as tranche_sched_pass_seconds.\n# TYPE tranche_sched_busy_seconds_total counter\ntranche_sched_busy_seconds_total {}",
        sh.pass_busy.as_secs_f64()
    );
    out
}

/// Serves `GET /metrics` on `addr` from a thread of its own (see
/// [`tranche_daemon_kit::metrics::serve`]), rendering this controller's metrics at
/// each scrape.
pub fn serve(addr: &str, shared: SharedRef) -> Result<(), String> {
    tranche_daemon_kit::metrics::serve(addr, move || render(&shared)).map(|_| ())
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, RwLock};

    use crate::mailbox::Shared;

    #[test]
    fn the_state_figures_are_exported() {
        let mut sh = Shared::new(1);
        sh.image_bytes = 12_345;
        let text = super::render(&Arc::new(RwLock::new(sh)));
        let lines: Vec<&str> = text.lines().collect();
        for want in [
            "tranche_state_jobs 0",
            "tranche_state_ended_jobs 0",
            "tranche_state_image_bytes 12345",
        ] {
            assert!(lines.contains(&want), "no line `{want}` in:\n{text}");
        }
    }
}
