//! Tranche's deterministic scenario runner: the real state machine (`tranche-state`)
//! and scheduler (`tranche-sched`) driven in virtual time, with simulated jobs that run
//! for a set time and react to their checkpoint signal as the scenario says.
//!
//! Admins use it to try a policy before applying it; tests use it to state behaviour
//! in files a reader can follow without reading Rust. `tranche sim` runs a job trace
//! through it under a policy and the policies it is compared with (`runs`), and
//! reports the figures (`report`) as tables, JSON and a page of plots (`page`,
//! `plot`). Like the core it drives, it is
//! pure: no clock, no threads, no I/O beyond what the caller hands it.
//!
//! Every fallible function returns its module's error enum ([`ScenarioError`],
//! [`SetupError`] and [`RunError`], [`TraceError`], [`SimulateError`], [`RunsError`],
//! [`PlotError`]): callers branch on the kind, and print the text, which names the
//! field, line or file and the rule it breaks.

pub mod engine;
pub mod page;
pub mod plot;
pub mod policy;
pub mod report;
pub mod runs;
pub mod scenario;
pub mod trace;
pub mod tracesim;
pub mod witness;

pub use engine::{run, Failure, Record, Refusal, Report, RunError, SetupError, Sim};
pub use plot::PlotError;
pub use runs::RunsError;
pub use scenario::{Scenario, ScenarioError};
pub use trace::TraceError;
pub use tracesim::SimulateError;

/// Renders a report as the readable timeline and summary.
pub fn render_text(r: &Report) -> String {
    use std::fmt::Write;
    let mut s = String::new();
    let w = r
        .records
        .iter()
        .map(|x| x.job.len())
        .max()
        .unwrap_or(3)
        .max(3);
    for x in &r.records {
        let nodes = if x.nodes.is_empty() {
            String::new()
        } else {
            format!(" [{}]", x.nodes.join(","))
        };
        let change = if x.from == x.to {
            format!("{} (stopping)", x.to)
        } else {
            format!("{} -> {}", x.from, x.to)
        };
        let _ = writeln!(
            s,
            "t={:<6} {:<w$}  {change}{nodes}  {}",
            format!("{}s", x.t),
            x.job,
            x.reason
        );
    }
    for f in &r.refusals {
        let _ = writeln!(
            s,
            "t={:<6} refused {}: {}",
            format!("{}s", f.t),
            f.event,
            f.error
        );
    }
    let _ = writeln!(
        s,
        "\nsummary at t={}s: {} placements, {} preemptions, {} scheduling passes",
        r.end_s, r.placements, r.preemptions, r.passes
    );
    for (name, st) in &r.jobs {
        let _ = writeln!(s, "  {name:<w$}  {st}");
    }
    for f in &r.failures {
        let _ = writeln!(
            s,
            "FAIL t={}s {}: expected {}, found {}",
            f.t, f.what, f.expected, f.found
        );
    }
    let _ = writeln!(
        s,
        "{} of {} expectations held",
        r.expectations - r.failed_expectations,
        r.expectations
    );
    s
}

/// Renders a report as JSON lines: one object per transition, then one summary object.
pub fn render_json(r: &Report) -> String {
    let mut s = String::new();
    for x in &r.records {
        s.push_str(&serde_json::to_string(x).expect("records encode"));
        s.push('\n');
    }
    let summary = serde_json::json!({
        "summary": true,
        "end_s": r.end_s,
        "placements": r.placements,
        "preemptions": r.preemptions,
        "passes": r.passes,
        "expectations": r.expectations,
        "failed_expectations": r.failed_expectations,
        "failures": r.failures,
        "refusals": r.refusals,
        "jobs": r.jobs,
        "passed": r.passed(),
    });
    s.push_str(&summary.to_string());
    s.push('\n');
    s
}
