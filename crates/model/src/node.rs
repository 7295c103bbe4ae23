//! Nodes and their GPUs.

use crate::error::{invalid, ValidationError};
use crate::ids::*;
use crate::Millis;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::fmt;

/// The most GPUs one node may report. Real nodes hold 8 or 16; the bound is wide
/// enough for a fake node that stands for a whole pool without placement constraints
/// (as a cohort does in Kueue's benchmark, `traces/kueue/`).
pub const MAX_GPUS_PER_NODE_INVENTORY: usize = 128;

/// One GPU as the agent reports it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Gpu {
    pub index: GpuIndex,
    pub uuid: String,
    pub unit: Unit,
    pub memory_mb: u64,
    pub healthy: bool,
}

/// What an agent reports when it registers.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeInventory {
    pub name: NodeName,
    pub address: String,
    pub labels: BTreeMap<String, String>,
    pub gpus: Vec<Gpu>,
    pub cpus: u32,
    pub memory_mb: u64,
}

impl NodeInventory {
    pub fn validate(&self) -> Result<(), ValidationError> {
        self.name.validate("name")?;
        if self.gpus.len() > MAX_GPUS_PER_NODE_INVENTORY {
            return Err(invalid(
                "gpus",
                format!("at most {MAX_GPUS_PER_NODE_INVENTORY} GPUs per node"),
            ));
        }
        let mut seen = std::collections::BTreeSet::new();
        for (i, g) in self.gpus.iter().enumerate() {
            g.unit.validate(&format!("gpus[{i}].unit"))?;
            if !seen.insert(g.index) {
                return Err(invalid(
                    format!("gpus[{i}].index"),
                    format!("index {} is listed twice", g.index),
                ));
            }
        }
        Ok(())
    }
}

/// The state shown for a node (sinfo's), derived from its flags and allocations.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum NodeState {
    Idle,
    Mixed,
    Allocated,
    Draining,
    Drained,
    Unreachable,
    Down,
}

impl fmt::Display for NodeState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            NodeState::Idle => "IDLE",
            NodeState::Mixed => "MIXED",
            NodeState::Allocated => "ALLOCATED",
            NodeState::Draining => "DRAINING",
            NodeState::Drained => "DRAINED",
            NodeState::Unreachable => "UNREACHABLE",
            NodeState::Down => "DOWN",
        })
    }
}

/// A node as the state machine keeps it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Node {
    pub inventory: NodeInventory,
    /// Which job holds each GPU, by position in `inventory.gpus`.
    pub allocated: Vec<Option<JobId>>,
    /// Set by an operator's drain, with its mandatory reason.
    pub drain: Option<String>,
    /// Set when the leader declared the node DOWN (its agent stopped heartbeating),
    /// with the reason. Only the leader's liveness judgement sets it, and heartbeats
    /// coming back clear it.
    pub down: Option<String>,
    pub unreachable: bool,
    pub registered_at: Millis,
}

impl Node {
    pub fn name(&self) -> &NodeName {
        &self.inventory.name
    }

    /// Whether new work may be placed here.
    pub fn schedulable(&self) -> bool {
        self.drain.is_none() && self.down.is_none() && !self.unreachable
    }

    pub fn state(&self) -> NodeState {
        let busy = self.allocated.iter().filter(|a| a.is_some()).count();
        if self.down.is_some() {
            NodeState::Down
        } else if self.unreachable {
            NodeState::Unreachable
        } else if self.drain.is_some() {
            if busy > 0 {
                NodeState::Draining
            } else {
                NodeState::Drained
            }
        } else if busy == 0 {
            NodeState::Idle
        } else if busy == self.allocated.len() {
            NodeState::Allocated
        } else {
            NodeState::Mixed
        }
    }

    /// Healthy, unallocated GPUs of `unit`, lowest index first.
    pub fn free_gpus<'a>(&'a self, unit: &'a Unit) -> impl Iterator<Item = GpuIndex> + 'a {
        self.inventory
            .gpus
            .iter()
            .zip(&self.allocated)
            .filter(move |(g, a)| a.is_none() && g.healthy && &g.unit == unit)
            .map(|(g, _)| g.index)
    }

    pub fn reason(&self) -> Option<&str> {
        self.down.as_deref().or(self.drain.as_deref())
    }
}
