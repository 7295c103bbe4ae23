//! `tranche shares`: per quota share and unit, its strategy, max, used, lent,
//! borrowed, running and waiting; the groups of shares as a tree, each with what its
//! shares use together; under a FAIR_SHARE policy, each share's decayed usage, weight
//! and place in the borrow order.

use std::process::ExitCode;

use tranche_model::{ShareGroup, ShareName};
use tranche_proto::{Query, Response, ShareUsage};

use super::ListArgs;
use crate::client_cfg::connect;
use crate::exit::{failed, run, unexpected};

pub fn shares(args: &ListArgs) -> ExitCode {
    run("shares", async {
        let (client, _) = connect(&args.config)?;
        let rows = match client.read(Query::Shares, false).await.map_err(failed)? {
            Response::Shares(s) => s,
            other => return Err(unexpected(&other)),
        };
        if args.json {
            println!("{}", serde_json::to_string(&rows).unwrap_or_default());
            return Ok(());
        }
        println!(
            "{:<14} {:<16} {:<6} {:>5} {:>5} {:>5} {:>8} {:>7} {:>7}",
            "SHARE", "STRATEGY", "UNIT", "MAX", "USED", "LENT", "BORROWED", "RUNNING", "WAITING"
        );
        for s in &rows {
            for (i, u) in s.units.iter().enumerate() {
                let (name, strategy, running, waiting) = if i == 0 {
                    (
                        s.name.to_string(),
                        s.strategy.to_string(),
                        s.running.to_string(),
                        s.waiting.to_string(),
                    )
                } else {
                    Default::default()
                };
                println!(
                    "{:<14} {:<16} {:<6} {:>5} {:>5} {:>5} {:>8} {:>7} {:>7}",
                    name,
                    strategy,
                    u.unit.as_str(),
                    u.max,
                    u.used,
                    u.lent,
                    u.borrowed,
                    running,
                    waiting
                );
            }
        }
        // Controllers of a release without groups do not know the question: none then.
        if let Ok(Response::Groups(groups)) = client.read(Query::Groups, false).await {
            if !groups.is_empty() {
                println!();
                for line in group_lines(&groups, &rows) {
                    println!("{line}");
                }
            }
        }
        let fair: Vec<_> = rows
            .iter()
            .filter_map(|s| s.fair.as_ref().map(|f| (s, f)))
            .collect();
        if !fair.is_empty() {
            println!();
            println!(
                "{:<14} {:>14} {:>7} {:>10} {:>12}  HALF-LIFE",
                "FAIR SHARE", "DECAYED GPU-H", "WEIGHT", "PER WEIGHT", "BORROWS"
            );
            for (s, f) in fair {
                let used = f.decayed_milli_gpu_hours as f64 / 1000.0;
                println!(
                    "{:<14} {:>14.1} {:>7} {:>10.3} {:>12}  {}",
                    s.name.to_string(),
                    used,
                    f.weight,
                    used / f.weight.max(1) as f64,
                    format!("{} of {}", f.borrow_order, f.of),
                    tranche_proto::text::duration_text(f.half_life_s * 1000)
                );
            }
        }
        Ok(())
    })
}

/// The groups as a tree (each under the group that holds it, indented), per unit of its
/// limits: strategy, max, what its shares use together, its ceiling, its members.
fn group_lines(groups: &[ShareGroup], rows: &[ShareUsage]) -> Vec<String> {
    fn used(
        g: &ShareGroup,
        unit: &tranche_model::Unit,
        groups: &[ShareGroup],
        rows: &[ShareUsage],
        depth: usize,
    ) -> u32 {
        let mine: u32 = rows
            .iter()
            .filter(|r| g.shares.contains(&r.name))
            .flat_map(|r| r.units.iter().filter(|u| &u.unit == unit))
            .map(|u| u.used)
            .sum();
        let below: u32 = groups
            .iter()
            .filter(|c| g.groups.contains(&c.name) && depth < tranche_model::MAX_GROUP_DEPTH)
            .map(|c| used(c, unit, groups, rows, depth + 1))
            .sum();
        mine + below
    }
    fn walk(
        g: &ShareGroup,
        depth: usize,
        groups: &[ShareGroup],
        rows: &[ShareUsage],
        out: &mut Vec<String>,
    ) {
        let members: Vec<String> = g
            .shares
            .iter()
            .map(|s| s.to_string())
            .chain(g.groups.iter().map(|m| format!("group {m}")))
            .collect();
        for (i, l) in g.capacity_limits.iter().enumerate() {
            let ceiling = g
                .ceiling_for(&l.unit)
                .map_or_else(|| "none".to_string(), |c| c.to_string());
            let (name, strategy, members) = match i {
                0 => (
                    format!("{}{}", "  ".repeat(depth), g.name),
                    g.resource_sharing.strategy.to_string(),
                    members.join(", "),
                ),
                _ => Default::default(),
            };
            out.push(format!(
                "{:<16} {:<16} {:<6} {:>5} {:>5} {:>8}  {}",
                name,
                strategy,
                l.unit.as_str(),
                l.max,
                used(g, &l.unit, groups, rows, 0),
                ceiling,
                members
            ));
        }
        if depth < tranche_model::MAX_GROUP_DEPTH {
            for m in &g.groups {
                if let Some(c) = groups.iter().find(|c| &c.name == m) {
                    walk(c, depth + 1, groups, rows, out);
                }
            }
        }
    }
    let mut out = vec![format!(
        "{:<16} {:<16} {:<6} {:>5} {:>5} {:>8}  MEMBERS",
        "GROUP", "STRATEGY", "UNIT", "MAX", "USED", "CEILING"
    )];
    let nested: Vec<&ShareName> = groups.iter().flat_map(|g| g.groups.iter()).collect();
    for g in groups.iter().filter(|g| !nested.contains(&&g.name)) {
        walk(g, 0, groups, rows, &mut out);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use tranche_model::*;
    use tranche_proto::UnitUsage;

    fn group(
        name: &str,
        shares: &[&str],
        groups: &[&str],
        max: u32,
        strategy: Strategy,
    ) -> ShareGroup {
        ShareGroup::new(name, "q", shares, groups, ("h100", max), strategy)
    }

    #[test]
    fn groups_print_as_a_tree_with_their_shares_use() {
        let row = |name: &str, used: u32| ShareUsage {
            name: name.into(),
            units: vec![UnitUsage {
                unit: "h100".into(),
                max: 8,
                used,
                lent: 0,
                borrowed: 0,
            }],
            ..serde_json::from_value(serde_json::json!({
                "name": name, "queue": "q", "strategy": "LEND", "units": [],
                "running": 0, "waiting": 0
            }))
            .unwrap()
        };
        let rows = vec![row("nlp", 3), row("vision", 5), row("ops", 2)];
        let groups = vec![
            group("org", &["ops"], &["research"], 32, Strategy::Reserve),
            group("research", &["nlp", "vision"], &[], 16, Strategy::Lend),
        ];
        let lines = group_lines(&groups, &rows);
        assert_eq!(lines.len(), 3, "{lines:#?}");
        assert!(lines[1].starts_with("org "), "{lines:#?}");
        assert!(
            lines[1].contains("RESERVE") && lines[1].contains(" 10 "),
            "{lines:#?}"
        );
        assert!(lines[1].ends_with("ops, group research"), "{lines:#?}");
        assert!(lines[2].starts_with("  research "), "{lines:#?}");
        assert!(
            lines[2].contains(" 8 ") && lines[2].ends_with("nlp, vision"),
            "{lines:#?}"
        );
    }
}
