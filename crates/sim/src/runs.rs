//! A trace simulated under a policy, and under the two it is compared with (a static
//! partition and pooled FIFO): each run's figures, the side-by-side table and the
//! figures as one JSON object. `tranche sim` and `tranche bench replay` read the
//! files and time the runs; this module only computes.

use crate::policy;
use crate::report::{self, Figures, Setup};
use crate::scenario::Scenario;
use crate::trace::{self, Columns, TraceJob};
use crate::tracesim;

/// Resolution of the report's time series.
pub const BUCKETS: usize = 600;

/// One simulated policy: its label, the figures, and how long the run took.
pub struct Run {
    pub label: String,
    pub setup: Setup,
    pub figures: Figures,
    pub passes: u64,
    pub wall_s: f64,
}

/// A policy to simulate: its label, its scenario and the trace as it sees it.
pub struct Variant {
    pub label: String,
    pub scenario: Scenario,
    pub jobs: Vec<TraceJob>,
}

/// The trace's jobs from the text of the trace file `name` (its columns mapped by
/// `columns`, as `--columns` gives them), only those submitted within `until_s`
/// seconds of the first submit when given.
pub fn load_trace(
    name: &str,
    text: &str,
    columns: Option<&str>,
    until_s: Option<u64>,
) -> Result<Vec<TraceJob>, String> {
    let cols = columns.map(Columns::parse).transpose()?.unwrap_or_default();
    let mut jobs = trace::parse(text, &cols).map_err(|e| format!("{name}: {e}"))?;
    if let Some(u) = until_s {
        let first = jobs[0].submit;
        jobs.retain(|j| j.submit < first + u * tranche_model::SECOND);
    }
    Ok(jobs)
}

/// The scenario of the policy file `name` from its text, its nodes replaced by
/// `nodes` (as `--nodes` gives them) when given.
pub fn load_policy(name: &str, text: &str, nodes: Option<&str>) -> Result<Scenario, String> {
    let nodes = nodes.map(policy::parse_nodes).transpose()?;
    policy::load(text, nodes).map_err(|e| format!("{name}: {e}"))
}

/// The policy named `name`, and with `compare` the static partition (every share
/// RESERVE at its max) and pooled FIFO (one share with every GPU) of the same trace.
pub fn variants(name: &str, sc: &Scenario, jobs: &[TraceJob], compare: bool) -> Vec<Variant> {
    let mut v = vec![Variant {
        label: name.to_string(),
        scenario: sc.clone(),
        jobs: jobs.to_vec(),
    }];
    if compare {
        v.push(Variant {
            label: "static partition (every share RESERVE)".into(),
            scenario: policy::static_partition(sc),
            jobs: jobs.to_vec(),
        });
        v.push(Variant {
            label: "pooled FIFO (one share, no quotas)".into(),
            scenario: policy::pooled(sc),
            jobs: policy::pooled_trace(jobs),
        });
    }
    v
}

/// Simulates one policy. `elapsed` is asked, as soon as the simulation ends, for the
/// seconds it took (by the caller's clock: this crate reads none).
pub fn run(
    label: &str,
    sc: &Scenario,
    jobs: &[TraceJob],
    elapsed: impl FnOnce() -> f64,
) -> Result<Run, String> {
    let out = tracesim::simulate(sc, jobs).map_err(|e| format!("{label}: {e}"))?;
    let wall_s = elapsed();
    let setup = Setup::of(sc);
    let figures = report::figures(&setup, &out.runs, BUCKETS);
    Ok(Run {
        label: label.into(),
        setup,
        figures,
        passes: out.passes,
        wall_s,
    })
}

/// The runs side by side, a row each.
pub fn comparison(runs: &[Run]) -> String {
    report::render_comparison(&labelled(runs))
}

/// (label, figures) of each run.
pub fn labelled(runs: &[Run]) -> Vec<(String, &Figures)> {
    runs.iter().map(|r| (r.label.clone(), &r.figures)).collect()
}

/// The figures of every run as one JSON object.
pub fn json(runs: &[Run]) -> serde_json::Value {
    serde_json::json!({
        "runs": runs.iter().map(|r| serde_json::json!({
            "policy": r.label,
            "figures": r.figures,
            "scheduling_passes": r.passes,
            "wall_s": r.wall_s,
        })).collect::<Vec<_>>(),
    })
}
