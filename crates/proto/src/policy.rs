//! A policy file as writes: the commands that apply it, in dependency order, and which
//! of them would change anything. `tranche apply` and the HTTP API's `POST
//! /api/v1/policy` both go through here.

use tranche_model::policy_file::PolicyObjects;
use tranche_model::ShareGroup;

use crate::{ClientCommand, Objects};

/// The commands a policy file stands for, each with its kind and name for reports, in
/// dependency order: environments, policies, queues, shares, then groups, each group
/// after the groups of the file it holds (file order otherwise; a cycle is left in file
/// order for the controllers to refuse).
pub fn commands(f: PolicyObjects) -> Vec<(&'static str, String, ClientCommand)> {
    let mut out: Vec<(&'static str, String, ClientCommand)> = Vec::new();
    out.extend(f.environments.into_iter().map(|e| {
        let name = e.name.to_string();
        ("environment", name, ClientCommand::PutEnvironment(e))
    }));
    out.extend(f.policies.into_iter().map(|p| {
        let name = p.name.to_string();
        ("policy", name, ClientCommand::PutPolicy(p))
    }));
    out.extend(f.queues.into_iter().map(|q| {
        let name = q.name.to_string();
        ("queue", name, ClientCommand::PutQueue(q))
    }));
    out.extend(f.shares.into_iter().map(|s| {
        let name = s.name.to_string();
        ("share", name, ClientCommand::PutShare(s))
    }));
    let mut groups = f.groups;
    while !groups.is_empty() {
        let ready = groups
            .iter()
            .position(|g| {
                g.groups
                    .iter()
                    .all(|m| !groups.iter().any(|o| &o.name == m))
            })
            .unwrap_or(0);
        let g = groups.remove(ready);
        out.push(("group", g.name.to_string(), ClientCommand::PutGroup(g)));
    }
    out
}

/// Whether the file has groups (whose current state is read with `Query::Groups`).
pub fn has_groups(cmds: &[(&'static str, String, ClientCommand)]) -> bool {
    cmds.iter()
        .any(|c| matches!(c.2, ClientCommand::PutGroup(_)))
}

/// `Some(true)`: exists and equal; `Some(false)`: exists and differs; `None`: new.
pub fn compare(cmd: &ClientCommand, o: &Objects, groups: &[ShareGroup]) -> Option<bool> {
    match cmd {
        ClientCommand::PutEnvironment(e) => o
            .environments
            .iter()
            .find(|x| x.name == e.name)
            .map(|x| x == e),
        ClientCommand::PutPolicy(p) => o.policies.iter().find(|x| x.name == p.name).map(|x| x == p),
        ClientCommand::PutQueue(q) => o.queues.iter().find(|x| x.name == q.name).map(|x| x == q),
        ClientCommand::PutShare(s) => o.shares.iter().find(|x| x.name == s.name).map(|x| x == s),
        ClientCommand::PutGroup(g) => groups.iter().find(|x| x.name == g.name).map(|x| x == g),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn groups_come_after_shares_and_after_the_groups_they_hold() {
        let text = r#"
            [[groups]]
            name = "org"
            queue = "q"
            groups = ["research"]
            capacity_limits = [{ unit = "h100", max = 32 }]
            strategy = "RESERVE"

            [[groups]]
            name = "research"
            queue = "q"
            shares = ["nlp"]
            capacity_limits = [{ unit = "h100", max = 16 }]
            strategy = "LEND"

            [[shares]]
            name = "nlp"
            queue = "q"
            strategy = "LEND"
            capacity_limits = [{ unit = "h100", max = 8 }]
        "#;
        let o = tranche_model::policy_file::parse(text).unwrap();
        let order: Vec<String> = super::commands(o)
            .into_iter()
            .map(|(k, n, _)| format!("{k} {n}"))
            .collect();
        assert_eq!(order, ["share nlp", "group research", "group org"]);
    }
}
