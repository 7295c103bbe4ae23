//! From a work item to the launch spec of its attempt on this node: the job's account
//! (see [`users`]), its working directory and environment, and the files its output
//! goes to (Slurm's `--output`/`--error` patterns, see [`crate::exec::output`]).

use tranche_proto::WorkItem;

use crate::config::AgentConfig;
use crate::exec::output::{output_files, PatternError, PatternFields};
use crate::exec::{ArrayTask, AttemptNo, BoundGpu, LaunchSpec, Rendezvous};
use crate::users::{self, Refusal};

/// Why a work item is not started on this node. Both are the user's (or the config's)
/// doing, not the node's fault: the attempt fails with this as its reason, nothing of
/// the job runs, and the node stays in service.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NotStarted {
    /// The job may not run as its user here.
    #[error("{0}")]
    Refused(#[from] Refusal),
    /// An `--output`/`--error` pattern cannot be expanded.
    #[error("{0}")]
    Output(#[from] PatternError),
}

/// The spec of `item`'s attempt on this node (`cfg.node`), running as the job's
/// account. Its output files are `item.output`/`item.error` expanded for this node and
/// rank, a relative one taken from the directory the job runs in (the submit directory
/// where it exists on this node, else the home; for a container, whose own working
/// directory is inside its image, the same directory on the node, where the shim
/// writes its output). The account lookup may ask a directory service: call it off an
/// async runtime.
pub fn launch_spec(
    cfg: &AgentConfig,
    item: &WorkItem,
    fake_devices: bool,
) -> Result<LaunchSpec, NotStarted> {
    let r = &item.rendezvous;
    let mut spec = LaunchSpec {
        job: item.job,
        attempt: AttemptNo(item.attempt),
        restart_count: item.restarts,
        share: item.share.to_string(),
        image: item.image.clone(),
        command: item.command.clone(),
        env: item.env.clone(),
        cwd: None,
        user: None,
        groups: Vec::new(),
        cpus: item.cpus,
        memory_mb: item.memory_mb,
        gpus: item
            .gpus
            .iter()
            .map(|b| BoundGpu {
                index: b.index,
                uuid: b.uuid.clone(),
            })
            .collect(),
        fake_devices,
        rendezvous: Some(Rendezvous {
            nodes: r.nodes.iter().map(|n| n.to_string()).collect(),
            rank: r.rank,
            gpus_per_node: r.gpus_per_node,
            master_addr: r.master_addr.clone(),
            master_port: r.master_port,
        }),
        name: item.name.clone(),
        array: item.array.as_ref().map(|a| ArrayTask {
            array: a.array,
            index: a.index,
            count: a.count,
        }),
        submit_dir: item.cwd.clone(),
        stdout_file: None,
        stderr_file: None,
        sagemaker: item.sagemaker.clone(),
        stop_signal: Some(item.signal.clone()),
    };
    let node = cfg.node.as_str();
    let account = users::resolve(cfg, item.user.as_str())?;
    let submit_dir = item.cwd.as_deref();
    account.apply_to(&mut spec, node, submit_dir)?;
    let fields = PatternFields {
        job: item.job,
        array: item.array.as_ref().map(|a| (a.array, a.index)),
        name: &item.name,
        user: &account.name,
        node,
        rank: r.rank,
    };
    let base = account.dir_on_node(submit_dir);
    (spec.stdout_file, spec.stderr_file) = output_files(
        item.output.as_deref(),
        item.error.as_deref(),
        &fields,
        std::path::Path::new(&base),
    )?;
    Ok(spec)
}
