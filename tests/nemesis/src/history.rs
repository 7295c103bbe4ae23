//! What happened during a run: every client operation with its invoke and complete
//! times and outcome, and every fault injected.

use std::sync::Mutex;
use std::time::{SystemTime, UNIX_EPOCH};

use serde::Serialize;

/// Unix time in microseconds (the clock the agents' GPU ledgers use too).
pub fn now_us() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_micros() as u64)
        .unwrap_or(0)
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum OpKind {
    Submit,
    Cancel,
    Priority,
    Policy,
    Drain,
    Resume,
}

/// How an operation ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    /// Acknowledged: committed and applied.
    Ok,
    /// Refused: nothing changed.
    Fail,
    /// No answer: it may or may not have taken effect.
    Unknown,
}

#[derive(Debug, Clone, Serialize)]
pub struct Op {
    pub client: usize,
    pub kind: OpKind,
    /// The job's name (submit) or the node or share the operation is about.
    pub subject: String,
    /// The job's id: given by an acknowledged submit, or the one operated on.
    pub job: Option<u64>,
    /// A priority, or which policy variant.
    pub value: Option<u32>,
    pub invoke_us: u64,
    pub complete_us: u64,
    pub outcome: Outcome,
    pub detail: String,
}

#[derive(Debug, Clone, Serialize)]
pub struct FaultRecord {
    pub kind: &'static str,
    /// The controller id or node name it hit.
    pub target: String,
    pub start_us: u64,
    pub healed_us: u64,
}

#[derive(Default)]
pub struct History {
    pub ops: Mutex<Vec<Op>>,
    pub faults: Mutex<Vec<FaultRecord>>,
}

impl History {
    pub fn op(&self, op: Op) {
        self.ops.lock().unwrap().push(op);
    }

    pub fn fault(&self, f: FaultRecord) {
        self.faults.lock().unwrap().push(f);
    }
}
