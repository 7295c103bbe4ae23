//! What an agent reports about an attempt of a job on its node. Both the client
//! protocol (an agent's report) and the replicated log (the command it becomes) carry
//! it, so it lives with the objects.

use serde::{Deserialize, Serialize};

/// What an agent reports about an attempt.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Progress {
    /// The container or process is being created.
    Starting,
    /// The job's process runs.
    Running,
    /// No process of the attempt is left. `code` is `None` when it was killed by a
    /// signal (SIGKILL at the end of the grace period, or the time limit).
    Exited {
        code: Option<i32>,
        reason: Option<String>,
    },
    /// No process of the attempt is left, and the agent cannot tell how it ended: it
    /// lost the attempt (the agent died before the job started, or the shim that
    /// watched the job vanished). Like an attempt on a DOWN node, the job is requeued;
    /// this is not the job's failure.
    Lost { reason: String },
    /// The job reported a checkpoint (it touched its `TRANCHE_CHECKPOINT_FILE`): a
    /// preemption from now on loses only the work done after this report.
    Checkpointed,
}
