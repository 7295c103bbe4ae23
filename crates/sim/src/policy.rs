//! The policy a trace is simulated under: a scenario file's `[environment]`,
//! `[[queues]]` and `[[shares]]` (and, optionally, its `[[nodes]]`), with the nodes
//! also given on the command line as `"64 x 8 h100"`. The comparison policies of
//! `--compare` are derived from it.

use crate::scenario::{GroupSpec, LimitSpec, NodeSpec, Scenario, ScenarioError, ShareSpec};
use std::collections::BTreeMap;
use tranche_model::{Strategy, MAX_GPUS_PER_NODE_INVENTORY};

/// A `--nodes` value that cannot be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NodesError {
    #[error("--nodes is empty; give COUNT x GPUS UNIT, e.g. \"64 x 8 h100\"")]
    Empty,
    /// A group breaks the rule `why`.
    #[error("node group {group:?}: {why}; give COUNT x GPUS UNIT, e.g. \"64 x 8 h100\"")]
    Group { group: String, why: String },
}

/// Parses `"64 x 8 h100"`: COUNT x GPUS UNIT, several groups joined by `+` or `,`.
pub fn parse_nodes(s: &str) -> Result<Vec<NodeSpec>, NodesError> {
    let groups: Vec<&str> = s
        .split(['+', ','])
        .map(str::trim)
        .filter(|g| !g.is_empty())
        .collect();
    if groups.is_empty() {
        return Err(NodesError::Empty);
    }
    let many = groups.len() > 1;
    groups
        .iter()
        .enumerate()
        .map(|(i, g)| {
            let bad = |why: &str| NodesError::Group {
                group: g.to_string(),
                why: why.to_string(),
            };
            let words: Vec<&str> = g.split_whitespace().collect();
            let (count, gpus, unit) = match words.as_slice() {
                [c, x, n, u] if x.eq_ignore_ascii_case("x") => (*c, *n, *u),
                [cx, n, u] if cx.to_ascii_lowercase().ends_with('x') => {
                    (&cx[..cx.len() - 1], *n, *u)
                }
                _ => return Err(bad("not in the form COUNT x GPUS UNIT")),
            };
            let count: u32 = count
                .parse()
                .ok()
                .filter(|c| *c >= 1)
                .ok_or_else(|| bad("COUNT must be a whole number, at least 1"))?;
            let gpus: u32 = gpus
                .parse()
                .ok()
                .filter(|g| (1..=MAX_GPUS_PER_NODE_INVENTORY as u32).contains(g))
                .ok_or_else(|| {
                    bad(&format!(
                        "GPUS must be a whole number 1-{MAX_GPUS_PER_NODE_INVENTORY}"
                    ))
                })?;
            Ok(NodeSpec {
                name: if many {
                    format!("g{}n", i + 1)
                } else {
                    "n".into()
                },
                count: Some(count),
                unit: unit.to_string(),
                gpus,
                labels: None,
            })
        })
        .collect()
}

/// Reads a policy file; `nodes` (from `--nodes`) replaces the file's `[[nodes]]`.
pub fn load(text: &str, nodes: Option<Vec<NodeSpec>>) -> Result<Scenario, ScenarioError> {
    tranche_model::text_limits::check_toml("policy file", text).map_err(ScenarioError::TooLarge)?;
    let mut sc: Scenario = toml::from_str(text)?;
    if !sc.events.is_empty() || !sc.expect.is_empty() {
        return Err(ScenarioError::PolicyHasJobs);
    }
    if sc.shares.is_empty() {
        return Err(ScenarioError::PolicyWithoutShares);
    }
    if let Some(n) = nodes {
        sc.nodes = n;
    }
    if sc.nodes.is_empty() {
        return Err(ScenarioError::NoNodes);
    }
    sc.check()?;
    Ok(sc)
}

/// GPUs of each unit on the nodes.
pub fn unit_totals(sc: &Scenario) -> BTreeMap<String, u32> {
    let mut m = BTreeMap::new();
    for n in &sc.nodes {
        *m.entry(n.unit.clone()).or_default() += n.gpus * n.count.unwrap_or(1);
    }
    m
}

/// The same shares under a FAIR_SHARE policy with this half-life.
pub fn fair_share(sc: &Scenario, half_life_s: u64) -> Scenario {
    let mut out = sc.clone();
    out.idle_resource_assignment = Some("FAIR_SHARE".into());
    out.usage_half_life_s = Some(half_life_s);
    out
}

/// The same shares in groups (nested shares), per queue of at least four shares: those
/// whose largest max is at least the queue's upper median (`large`), and the rest
/// (`small`), each
/// group LEND_AND_BORROW without cap, its max per unit the sum of its members'. Small
/// teams lend to each other first, and a reclaim for one of them takes back first from
/// the large teams' borrowers.
pub fn nested(sc: &Scenario) -> Scenario {
    let mut out = sc.clone();
    let size = |s: &ShareSpec| s.capacity_limits.iter().map(|l| l.max).max().unwrap_or(0);
    let mut queues: BTreeMap<String, Vec<usize>> = BTreeMap::new();
    for i in 0..sc.shares.len() {
        queues.entry(sc.share_queue(i)).or_default().push(i);
    }
    for (q, members) in queues {
        if members.len() < 4 {
            continue;
        }
        let mut sizes: Vec<u32> = members.iter().map(|&i| size(&sc.shares[i])).collect();
        sizes.sort_unstable();
        let median = sizes[sizes.len() / 2];
        for (label, large) in [("large", true), ("small", false)] {
            let part: Vec<&ShareSpec> = members
                .iter()
                .map(|&i| &sc.shares[i])
                .filter(|s| (size(s) >= median) == large)
                .collect();
            let mut max: BTreeMap<String, u32> = BTreeMap::new();
            for s in &part {
                for l in &s.capacity_limits {
                    *max.entry(l.unit.clone()).or_default() += l.max;
                }
            }
            out.groups.push(GroupSpec {
                name: format!("{label}-{q}"),
                queue: sc.shares[members[0]].queue.clone(),
                shares: part.iter().map(|s| s.name.clone()).collect(),
                groups: vec![],
                capacity_limits: max
                    .into_iter()
                    .map(|(unit, max)| LimitSpec { unit, max })
                    .collect(),
                strategy: Strategy::LendAndBorrow,
                borrow_limit: Some(-1),
            });
        }
    }
    out
}

/// The same shares as a static partition: every share RESERVE at its max.
pub fn static_partition(sc: &Scenario) -> Scenario {
    let mut out = sc.clone();
    for s in &mut out.shares {
        s.strategy = Strategy::Reserve;
        s.borrow_limit = None;
    }
    out
}

/// The name of the one share of [`pooled`].
pub const POOL: &str = "pool";

/// Pooled FIFO: one share with every GPU, no quotas; jobs keep their priority and no
/// one preempts anyone.
pub fn pooled(sc: &Scenario) -> Scenario {
    let mut out = sc.clone();
    let first = sc.shares[0].clone();
    // One share: no groups.
    out.groups.clear();
    // One environment with every node, one queue on it.
    out.environments.clear();
    out.environment = None;
    out.queues.truncate(1);
    for q in &mut out.queues {
        q.environment = None;
    }
    let grace = sc.shares.iter().filter_map(|s| s.default_grace_s).max();
    out.shares = vec![ShareSpec {
        weight: None,
        name: POOL.into(),
        queue: out.queues.first().map(|q| q.name.clone()),
        capacity_limits: unit_totals(sc)
            .into_iter()
            .map(|(unit, max)| LimitSpec { unit, max })
            .collect(),
        strategy: Strategy::Reserve,
        borrow_limit: None,
        in_share_preemption: Some(false),
        default_grace_s: grace.or(first.default_grace_s),
        max_grace_s: sc.shares.iter().filter_map(|s| s.max_grace_s).max(),
        min_runtime_s: None,
        loan_min_runtime_s: None,
        recall_notice_s: None,
        state: None,
    }];
    out
}

/// The trace as [`pooled`] runs it: every job in the one share.
pub fn pooled_trace(jobs: &[crate::trace::TraceJob]) -> Vec<crate::trace::TraceJob> {
    jobs.iter()
        .map(|j| crate::trace::TraceJob {
            share: POOL.into(),
            ..j.clone()
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    const POLICY: &str = r#"
[[shares]]
name = "a"
capacity_limits = [{ unit = "h100", max = 8 }]
strategy = "LEND_AND_BORROW"
borrow_limit = 100
[[shares]]
name = "b"
capacity_limits = [{ unit = "h100", max = 8 }]
strategy = "LEND"
"#;

    #[test]
    fn nested_groups_large_and_small_shares_and_pooled_has_none() {
        let mut text = String::new();
        for (name, max) in [("a", 1), ("b", 2), ("c", 3), ("d", 4), ("e", 5)] {
            text += &format!(
                "[[shares]]\nname = \"{name}\"\ncapacity_limits = [{{ unit = \"h100\", max = {max} }}]\nstrategy = \"LEND_AND_BORROW\"\n"
            );
        }
        let nodes = || Some(parse_nodes("2 x 8 h100").unwrap());
        let sc = load(&text, nodes()).unwrap();
        let n = nested(&sc);
        let got: Vec<(String, Vec<String>, u32)> = n
            .groups
            .iter()
            .map(|g| (g.name.clone(), g.shares.clone(), g.capacity_limits[0].max))
            .collect();
        let names = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert_eq!(
            got,
            [
                ("large-default".to_string(), names(&["c", "d", "e"]), 12),
                ("small-default".to_string(), names(&["a", "b"]), 3)
            ]
        );
        // Fewer than four shares: no groups; one pool: none either.
        assert!(nested(&load(POLICY, nodes()).unwrap()).groups.is_empty());
        assert!(pooled(&n).groups.is_empty());
    }

    #[test]
    fn nodes_are_read_as_count_x_gpus_unit() {
        let n = parse_nodes("64 x 8 h100").unwrap();
        assert_eq!(
            (n[0].count, n[0].gpus, n[0].unit.as_str()),
            (Some(64), 8, "h100")
        );
        let n = parse_nodes("2x 4 a100 + 3 x 8 h100").unwrap();
        assert_eq!(n.len(), 2);
        assert_eq!((n[1].name.as_str(), n[1].count), ("g2n", Some(3)));
        assert!(parse_nodes("64 8 h100")
            .unwrap_err()
            .to_string()
            .contains("COUNT x GPUS UNIT"));
        assert!(parse_nodes("0 x 8 h100")
            .unwrap_err()
            .to_string()
            .contains("at least 1"));
        assert!(parse_nodes("1 x 129 h100")
            .unwrap_err()
            .to_string()
            .contains("1-128"));
        assert_eq!(parse_nodes(" + ").unwrap_err(), NodesError::Empty);
    }

    #[test]
    fn a_policy_and_its_comparisons() {
        let sc = load(POLICY, Some(parse_nodes("2 x 8 h100").unwrap())).unwrap();
        assert_eq!(unit_totals(&sc)["h100"], 16);
        let st = static_partition(&sc);
        assert!(st.shares.iter().all(|s| s.strategy == Strategy::Reserve));
        assert!(st.shares.iter().all(|s| s.borrow_limit.is_none()));
        let p = pooled(&sc);
        assert_eq!(p.shares.len(), 1);
        assert_eq!(p.shares[0].capacity_limits[0].max, 16);
        let e = load(POLICY, None).unwrap_err();
        assert!(matches!(e, ScenarioError::NoNodes), "{e:?}");
        assert!(e.to_string().contains("no nodes"), "{e}");
        let e = load("[[shares]]\nname = \"a\"\n", None).unwrap_err();
        assert!(matches!(e, ScenarioError::Toml(_)), "{e:?}");
        assert!(e.to_string().contains("capacity_limits"), "{e}");
    }
}
