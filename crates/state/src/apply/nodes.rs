//! The nodes' commands: registration (a node's inventory, its GPUs keeping their
//! holders), drain, and DOWN, which loses the node's attempts.

use crate::command::*;
use crate::state::*;
use std::collections::BTreeSet;
use tranche_model::*;

impl State {
    pub(super) fn with_node(
        &mut self,
        name: &NodeName,
        f: impl FnOnce(&mut Node),
    ) -> Result<(), ApplyError> {
        let node = self
            .nodes
            .get_mut(name)
            .ok_or_else(|| not_found("node", name))?;
        f(node);
        Ok(())
    }

    pub(super) fn register_node(
        &mut self,
        inv: &NodeInventory,
        now: Millis,
    ) -> Result<(), ApplyError> {
        inv.validate()?;
        let mut inv = inv.clone();
        let mut drain = None;
        let allocated = match self.nodes.get(&inv.name) {
            None => vec![None; inv.gpus.len()],
            Some(old) => {
                drain = old.drain.clone();
                // GPUs keep their holder by index; a held GPU missing from the new
                // inventory stays listed, unhealthy, until its job ends.
                let mut allocated: Vec<Option<JobId>> = inv
                    .gpus
                    .iter()
                    .map(|g| {
                        old.inventory
                            .gpus
                            .iter()
                            .position(|o| o.index == g.index)
                            .and_then(|i| old.allocated[i])
                    })
                    .collect();
                for (g, a) in old.inventory.gpus.iter().zip(&old.allocated) {
                    if a.is_some() && !inv.gpus.iter().any(|n| n.index == g.index) {
                        inv.gpus.push(Gpu {
                            healthy: false,
                            ..g.clone()
                        });
                        allocated.push(*a);
                    }
                }
                allocated
            }
        };
        if drain.is_none() {
            if let Some(g) = inv.gpus.iter().find(|g| !g.healthy) {
                drain = Some(format!("GPU {} ({}) reported unhealthy", g.index, g.uuid));
            }
        }
        let registered_at = self
            .nodes
            .get(&inv.name)
            .map(|n| n.registered_at)
            .unwrap_or(now);
        self.index.names.add_node(&inv);
        self.nodes.insert(
            inv.name.clone(),
            Node {
                inventory: inv,
                allocated,
                drain,
                down: None,
                unreachable: false,
                registered_at,
            },
        );
        Ok(())
    }

    fn jobs_on(&self, node: &NodeName) -> Vec<JobId> {
        let Some(n) = self.nodes.get(node) else {
            return vec![];
        };
        let set: BTreeSet<JobId> = n.allocated.iter().flatten().copied().collect();
        set.into_iter().collect()
    }

    pub(super) fn drain_node(
        &mut self,
        name: &NodeName,
        reason: &str,
        stop: bool,
        now: Millis,
    ) -> Result<(), ApplyError> {
        if !self.nodes.contains_key(name) {
            return Err(not_found("node", name));
        }
        if reason.trim().is_empty() {
            return Err(ValidationError::new(
                "reason",
                "a drain needs a reason (e.g. \"xid 79 on GPU 3\")",
            )
            .into());
        }
        validate_reason(reason)?;
        self.nodes.get_mut(name).expect("exists").drain = Some(reason.to_string());
        if stop {
            for id in self.jobs_on(name) {
                if self.jobs[&id].stop.is_none() {
                    self.stop_or_cancel(
                        id,
                        StopKind::Drain,
                        &format!("node {name} drained: {reason}"),
                        now,
                    );
                }
            }
        }
        Ok(())
    }

    /// A node declared DOWN loses its jobs: each attempt is lost and the job requeued
    /// (neither a failure nor a preemption), or ends as its stop meant.
    pub(super) fn node_down(
        &mut self,
        name: &NodeName,
        reason: &str,
        now: Millis,
    ) -> Result<(), ApplyError> {
        if !self.nodes.contains_key(name) {
            return Err(not_found("node", name));
        }
        validate_reason(reason)?;
        if reason.trim().is_empty() {
            return Err(
                ValidationError::new("reason", "marking a node DOWN needs a reason").into(),
            );
        }
        self.nodes.get_mut(name).expect("exists").down = Some(reason.to_string());
        for id in self.jobs_on(name) {
            let job = &self.jobs[&id];
            let nodes: Vec<NodeName> = job.allocation().iter().map(|a| a.node.clone()).collect();
            let why = if job.stop.is_some() {
                "node down".to_string()
            } else {
                format!("node {name} DOWN ({reason})")
            };
            self.attempt_lost(id, &why, nodes, now);
        }
        Ok(())
    }
}
