//! A trace simulated under a policy, and under the two it is compared with (a static
//! partition and pooled FIFO): each run's figures, the side-by-side table and the
//! figures as one JSON object. `tranche sim` and `tranche bench replay` read the
//! files and time the runs; this module only computes.

use crate::policy::{self, NodesError};
use crate::report::{self, Figures, Setup};
use crate::scenario::{Scenario, ScenarioError};
use crate::trace::{self, Columns, ColumnsError, TraceError, TraceJob};
use crate::tracesim::{self, SimulateError};

/// Why a trace, a policy or a run failed; the files are named as the caller named them.
#[derive(Debug, thiserror::Error)]
pub enum RunsError {
    #[error(transparent)]
    Columns(#[from] ColumnsError),
    #[error("{file}: {error}")]
    Trace {
        file: String,
        #[source]
        error: TraceError,
    },
    #[error(transparent)]
    Nodes(#[from] NodesError),
    #[error("{file}: {error}")]
    Policy {
        file: String,
        #[source]
        error: ScenarioError,
    },
    /// The policy labelled `label` could not be simulated.
    #[error("{label}: {error}")]
    Simulate {
        label: String,
        #[source]
        error: SimulateError,
    },
}

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
) -> Result<Vec<TraceJob>, RunsError> {
    let cols = columns.map(Columns::parse).transpose()?.unwrap_or_default();
    let mut jobs = trace::parse(text, &cols).map_err(|error| RunsError::Trace {
        file: name.into(),
        error,
    })?;
    if let Some(u) = until_s {
        let first = jobs[0].submit;
        jobs.retain(|j| j.submit < first + u * tranche_model::SECOND);
    }
    Ok(jobs)
}

/// The scenario of the policy file `name` from its text, its nodes replaced by
/// `nodes` (as `--nodes` gives them) when given.
pub fn load_policy(name: &str, text: &str, nodes: Option<&str>) -> Result<Scenario, RunsError> {
    let nodes = nodes.map(policy::parse_nodes).transpose()?;
    policy::load(text, nodes).map_err(|error| RunsError::Policy {
        file: name.into(),
        error,
    })
}

/// The policy named `name`, and with `compare` the same shares under FAIR_SHARE (for
/// a FIFO policy; half-life 7 days), the static partition (every share RESERVE at its
/// max) and pooled FIFO (one share with every GPU) of the same trace.
pub fn variants(name: &str, sc: &Scenario, jobs: &[TraceJob], compare: bool) -> Vec<Variant> {
    let mut v = vec![Variant {
        label: name.to_string(),
        scenario: sc.clone(),
        jobs: jobs.to_vec(),
    }];
    if compare && sc.usage_half_life_s.is_none() {
        v.push(Variant {
            label: "fair share (FAIR_SHARE, half-life 7 d)".into(),
            scenario: policy::fair_share(sc, 7 * 24 * 3600),
            jobs: jobs.to_vec(),
        });
    }
    if compare && sc.groups.is_empty() {
        let nested = policy::nested(sc);
        if !nested.groups.is_empty() {
            v.push(Variant {
                label: "nested (large and small shares in two groups)".into(),
                scenario: nested,
                jobs: jobs.to_vec(),
            });
        }
    }
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
/// seconds it took (by the caller's clock: this crate reads none). `every_job`: see
/// [`tracesim::simulate_with`].
pub fn run(
    label: &str,
    sc: &Scenario,
    jobs: &[TraceJob],
    every_job: bool,
    elapsed: impl FnOnce() -> f64,
) -> Result<Run, RunsError> {
    let out =
        tracesim::simulate_with(sc, jobs, every_job).map_err(|error| RunsError::Simulate {
            label: label.into(),
            error,
        })?;
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

#[cfg(test)]
mod tests {
    use super::*;

    const TRACE: &str = "submit_s,share,gpus,duration_s\n0,a,1,10\n";
    const POLICY: &str =
        "[[shares]]\nname = \"a\"\ncapacity_limits = [{ unit = \"h100\", max = 4 }]\nstrategy = \"RESERVE\"\n";

    #[test]
    fn each_input_fails_with_its_kind_and_names_its_file() {
        let e = load_trace("t.csv", TRACE, Some("gpus"), None).unwrap_err();
        assert!(
            matches!(e, RunsError::Columns(ColumnsError::NotAPair { .. })),
            "{e:?}"
        );
        let e = load_trace("t.csv", "submit_s,share,gpu\n", None, None).unwrap_err();
        match &e {
            RunsError::Trace { file, error } => {
                assert_eq!(file, "t.csv");
                assert_eq!(error.column(), Some("gpu"));
            }
            e => panic!("not a trace error: {e:?}"),
        }
        assert!(
            e.to_string()
                .starts_with("t.csv: line 1, column gpu: not a trace field"),
            "{e}"
        );
        let e = load_policy("p.toml", POLICY, Some("4 h100")).unwrap_err();
        assert!(
            matches!(e, RunsError::Nodes(NodesError::Group { .. })),
            "{e:?}"
        );
        let e = load_policy("p.toml", POLICY, None).unwrap_err();
        assert!(
            matches!(&e, RunsError::Policy { file, error: ScenarioError::NoNodes } if file == "p.toml"),
            "{e:?}"
        );
        let sc = load_policy("p.toml", POLICY, Some("1 x 4 h100")).unwrap();
        let jobs = load_trace("t.csv", TRACE, None, None).unwrap();
        assert_eq!(run("p", &sc, &jobs, false, || 0.0).unwrap().figures.jobs, 1);
        let wide = load_trace(
            "t.csv",
            "submit_s,share,gpus,duration_s\n0,a,6,10\n",
            None,
            None,
        )
        .unwrap();
        let Err(e) = run("p", &sc, &wide, false, || 0.0) else {
            panic!("a job wider than a node ran");
        };
        assert!(
            matches!(
                &e,
                RunsError::Simulate {
                    error: SimulateError::Trace(TraceError::Policy { column: "gpus", .. }),
                    ..
                }
            ),
            "{e:?}"
        );
    }
}
