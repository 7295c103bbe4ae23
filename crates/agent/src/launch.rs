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

#[cfg(test)]
mod tests {
    use super::*;
    use tranche_model::JobId;

    /// A config for node `n3` mapping `alice` to the account running the tests.
    fn config() -> (AgentConfig, String) {
        let me = nix::unistd::User::from_uid(nix::unistd::Uid::effective())
            .unwrap()
            .unwrap()
            .name;
        let text = format!(
            "node = \"n3\"\ncontrollers = [\"127.0.0.1:7100\"]\nspool_dir = \"/x\"\n\
             inventory = \"fake\"\nfake = \"1 x h100\"\nallow_root = true\n\
             [users]\nalice = \"{me}\"\n[tls]\nca = \"/c\"\ncert = \"/c\"\nkey = \"/c\"\n"
        );
        (AgentConfig::parse(&text, "agent.toml").unwrap(), me)
    }

    fn item(cwd: &str) -> WorkItem {
        WorkItem {
            job: JobId(49),
            attempt: 1,
            status: tranche_model::JobStatus::Scheduled,
            share: "research".into(),
            restarts: 0,
            image: "host".into(),
            command: vec!["true".into()],
            env: Default::default(),
            cpus: 0,
            memory_mb: 0,
            gpus: Vec::new(),
            time_limit_s: None,
            scheduled_at: 0,
            started_at: None,
            signal: "SIGTERM".into(),
            stop: None,
            user: "alice".into(),
            cwd: Some(cwd.into()),
            rendezvous: tranche_proto::Rendezvous {
                nodes: vec!["n1".into(), "n3".into()],
                rank: 1,
                gpus_per_node: 0,
                master_addr: "10.0.0.1".into(),
                master_port: 20_000,
            },
            name: "sweep".into(),
            array: Some(tranche_model::ArrayTask {
                array: JobId(42),
                index: 7,
                count: 10,
                max_running: None,
            }),
            output: Some("out-%A_%a-%u-%N-%n.txt".into()),
            error: None,
        }
    }

    #[test]
    fn a_work_item_becomes_a_spec_with_its_array_name_and_output_files() {
        let (cfg, me) = config();
        let dir = tempfile::tempdir().unwrap();
        let cwd = dir.path().to_str().unwrap();
        let spec = launch_spec(&cfg, &item(cwd), false).unwrap();
        let out = format!("{cwd}/out-42_7-{me}-n3-1.txt");
        assert_eq!(spec.stdout_file.as_deref(), Some(out.as_str()));
        assert_eq!(spec.stderr_file.as_deref(), Some(out.as_str()));
        assert_eq!(spec.cwd.as_deref(), Some(cwd));
        assert_eq!(spec.submit_dir.as_deref(), Some(cwd));
        assert_eq!(spec.name, "sweep");
        assert_eq!(
            spec.array,
            Some(ArrayTask {
                array: JobId(42),
                index: 7,
                count: 10
            })
        );
        // A submit directory not on this node: the files go to the home, as the job.
        let mut elsewhere = item("/nonexistent/shared/project");
        elsewhere.error = Some("/abs/err".into());
        let spec = launch_spec(&cfg, &elsewhere, false).unwrap();
        let home = spec.env["HOME"].clone();
        let out = std::path::Path::new(&home).join(format!("out-42_7-{me}-n3-1.txt"));
        assert_eq!(spec.stdout_file, Some(out.display().to_string()));
        assert_eq!(spec.stderr_file.as_deref(), Some("/abs/err"));
        assert_eq!(
            spec.submit_dir.as_deref(),
            Some("/nonexistent/shared/project")
        );
    }

    #[test]
    fn a_bad_pattern_is_not_started_and_says_why() {
        let (cfg, _) = config();
        let mut it = item("/");
        it.error = Some("err-%q".into());
        let e = launch_spec(&cfg, &it, false).unwrap_err();
        assert!(matches!(e, NotStarted::Output(_)), "{e:?}");
        assert!(
            e.to_string()
                .starts_with("--error pattern `err-%q`: `%q` is not a field"),
            "{e}"
        );
    }
}
