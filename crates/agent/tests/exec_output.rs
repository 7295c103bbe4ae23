//! What a script ported from `sbatch` expects of its job on a node: the array, name,
//! submit-directory and size variables, and Slurm's `--output`/`--error` files, created
//! as the job's user in the directory the job runs in, and read back as `tranche logs`
//! reads them. Each work item goes the agent's way: `work_item::launch_spec` (account,
//! working directory, patterns), then the executors.
//!
//! These tests need root and `useradd` (runc, or crun, and a static busybox for the
//! container one); without them each says so through `exec_common::not_run` and
//! returns, or fails under CI as root.

mod exec_common;

use std::collections::BTreeMap;
use std::io::Read;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use exec_common::*;
use tranche_agent::exec::{kept_output, Attempt, Executors, OutputFile};
use tranche_agent::work_item::{launch_spec, NotStarted};
use tranche_model::{ArrayTask, JobId, JobStatus};
use tranche_proto::{Rendezvous, WorkItem};

const LONG: Duration = Duration::from_secs(30);

/// Task 7 of array 42 (of 10), job `id`, named `sweep`, of user `alice`, submitted from
/// `submit_dir`, running `script` in `sh` on this node (`n3`, rank 0).
fn array_task(id: JobId, submit_dir: &Path, script: &str) -> WorkItem {
    WorkItem {
        job: id,
        attempt: 1,
        status: JobStatus::Scheduled,
        share: "research".into(),
        restarts: 0,
        image: "host".into(),
        command: vec!["sh".into(), "-c".into(), script.into()],
        env: BTreeMap::new(),
        cpus: 0,
        memory_mb: 0,
        gpus: Vec::new(),
        time_limit_s: None,
        scheduled_at: 0,
        started_at: None,
        signal: "SIGTERM".into(),
        stop: None,
        user: "alice".into(),
        cwd: Some(submit_dir.display().to_string()),
        rendezvous: Rendezvous {
            nodes: vec!["n3".into()],
            rank: 0,
            gpus_per_node: 0,
            master_addr: "127.0.0.1".into(),
            master_port: 20_000,
        },
        name: "sweep".into(),
        array: Some(ArrayTask {
            array: JobId(42),
            index: 7,
            count: 10,
            max_running: Some(2),
        }),
        output: None,
        error: None,
        sagemaker: None,
    }
}

/// What each test stands on: an account `alice` is mapped to, a submit directory it
/// owns, executors, and an agent config for node `n3`.
struct Setup {
    acct: TestAccount,
    cfg: tranche_agent::config::AgentConfig,
    submit: PathBuf,
    ex: Executors,
    dir: TestDir,
    _accounts: TestAccounts,
}

impl Setup {
    /// The setup of `test`, or `None` where this machine cannot give it what it
    /// `need`s (having said so through `not_run`).
    fn of(test: &str, need: Need, tag: &str) -> Option<Setup> {
        if lacks_accounts(test, need) {
            return None;
        }
        Some(Setup::new(tag))
    }

    fn new(tag: &str) -> Setup {
        init();
        let mut accounts = TestAccounts::new();
        let acct = accounts.user(tag, &[], true);
        let cfg = agent_config(&format!("[users]\nalice = \"{}\"\n", acct.name));
        let dir = test_dir();
        // The user must reach its submit directory through the test directory.
        std::fs::set_permissions(
            dir.path(),
            std::os::unix::fs::PermissionsExt::from_mode(0o755),
        )
        .unwrap();
        let submit = dir.path().join("project");
        std::fs::create_dir(&submit).unwrap();
        std::os::unix::fs::chown(&submit, Some(acct.uid), Some(acct.gid)).unwrap();
        let ex = Executors::new(&dir.path().join("spool")).unwrap();
        Setup {
            acct,
            cfg,
            submit,
            ex,
            dir,
            _accounts: accounts,
        }
    }

    /// Starts `item` the agent's way and waits for its successful end.
    fn run(&self, item: &WorkItem) -> Attempt {
        let spec = launch_spec(&self.cfg, item, true).unwrap();
        let a = self.ex.start(&spec).unwrap();
        let st = wait_exit(&a, LONG);
        assert_eq!(st.code, Some(0), "{st:?}; stderr: {}", stderr(&a));
        a
    }

    /// Asserts that `path` is the job user's, holding exactly `want`.
    fn assert_users_file(&self, path: &Path, want: &str) {
        let m = std::fs::metadata(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        assert_eq!(
            (m.uid(), m.gid()),
            (self.acct.uid, self.acct.gid),
            "{}",
            path.display()
        );
        assert_eq!(
            std::fs::read_to_string(path).unwrap(),
            want,
            "{}",
            path.display()
        );
    }
}

/// Everything `f` opens to.
fn read_all(f: &OutputFile) -> String {
    let mut s = String::new();
    f.open()
        .unwrap_or_else(|e| panic!("{}: {e}", f.path().display()))
        .read_to_string(&mut s)
        .unwrap();
    s
}

/// The spec the agent makes of a work item: its array, name and submit directory, and
/// its output files expanded for this node and rank, relative to the directory the job
/// runs in. Needs no account: `alice` is whoever runs the tests.
#[test]
fn a_work_item_becomes_a_spec_with_its_array_name_and_output_files() {
    let me = nix::unistd::User::from_uid(nix::unistd::Uid::effective())
        .unwrap()
        .unwrap()
        .name;
    let cfg = agent_config(&format!("allow_root = true\n[users]\nalice = \"{me}\"\n"));
    let dir = test_dir();
    let cwd = dir.path().to_str().unwrap();
    let mut item = array_task(JobId(49), dir.path(), "true");
    item.rendezvous.nodes = vec!["n1".into(), "n3".into()];
    item.rendezvous.rank = 1;
    item.output = Some("out-%A_%a-%u-%N-%n.txt".into());
    let spec = launch_spec(&cfg, &item, false).unwrap();
    let out = format!("{cwd}/out-42_7-{me}-n3-1.txt");
    assert_eq!(spec.stdout_file.as_deref(), Some(out.as_str()));
    assert_eq!(spec.stderr_file.as_deref(), Some(out.as_str()));
    assert_eq!(spec.cwd.as_deref(), Some(cwd));
    assert_eq!(spec.submit_dir.as_deref(), Some(cwd));
    assert_eq!(spec.name, "sweep");
    let array = spec.array.unwrap();
    assert_eq!((array.array, array.index, array.count), (JobId(42), 7, 10));
    // A submit directory not on this node: the files go to the home, as the job does.
    item.cwd = Some("/nonexistent/shared/project".into());
    item.error = Some("/abs/err-%j".into());
    let spec = launch_spec(&cfg, &item, false).unwrap();
    let out = Path::new(&spec.env["HOME"]).join(format!("out-42_7-{me}-n3-1.txt"));
    assert_eq!(spec.stdout_file, Some(out.display().to_string()));
    assert_eq!(spec.stderr_file.as_deref(), Some("/abs/err-49"));
    assert_eq!(spec.submit_dir.as_deref(), item.cwd.as_deref());
    // An unknown field: not started, and why.
    item.error = Some("err-%q".into());
    let e = launch_spec(&cfg, &item, false).unwrap_err();
    assert!(matches!(e, NotStarted::Output(_)), "{e:?}");
    assert!(
        e.to_string()
            .starts_with("--error pattern `err-%q`: `%q` is not a field"),
        "{e}"
    );
}

#[test]
fn a_task_of_an_array_gets_slurms_variables() {
    let Some(s) = Setup::of("a_task_of_an_array_gets_slurms_variables", Need::Root, "av") else {
        return;
    };
    let mut item = array_task(job_id(), &s.submit, "env");
    item.cpus = 2;
    item.memory_mb = 512;
    let a = s.run(&item);
    let env = env_lines(&stdout(&a));
    let submit = s.submit.display().to_string();
    for (k, v) in [
        ("TRANCHE_ARRAY_JOB_ID", "42"),
        ("TRANCHE_ARRAY_TASK_ID", "7"),
        ("TRANCHE_ARRAY_TASK_COUNT", "10"),
        ("TRANCHE_JOB_NAME", "sweep"),
        ("TRANCHE_SUBMIT_DIR", submit.as_str()),
        ("TRANCHE_CPUS_PER_NODE", "2"),
        ("TRANCHE_MEM_PER_NODE", "512"),
        ("PWD", submit.as_str()),
    ] {
        assert_eq!(env.get(k).map(String::as_str), Some(v), "{k} in {env:?}");
    }
    // A job that is no task of an array has none of the array's variables.
    let mut single = array_task(job_id(), &s.submit, "env");
    single.array = None;
    let a = s.run(&single);
    let env = env_lines(&stdout(&a));
    assert!(!env.contains_key("TRANCHE_ARRAY_TASK_ID"), "{env:?}");
    assert!(!env.contains_key("TRANCHE_CPUS_PER_NODE"), "{env:?}");
    assert_eq!(env["TRANCHE_JOB_NAME"], "sweep");
}

/// `--output out-%A_%a.txt` alone: the file in the submit directory, truncated, the
/// user's, with stdout and stderr in order; nothing in the spool; readable through the
/// attempt and, once acknowledged, through the kept record, but not once replaced.
#[test]
fn output_alone_takes_stdout_and_stderr_into_the_users_file() {
    let Some(s) = Setup::of(
        "output_alone_takes_stdout_and_stderr_into_the_users_file",
        Need::Root,
        "oa",
    ) else {
        return;
    };
    let out = s.submit.join("out-42_7.txt");
    std::fs::write(&out, "left from an earlier run\n").unwrap();
    std::os::unix::fs::chown(&out, Some(s.acct.uid), Some(s.acct.gid)).unwrap();
    let mut item = array_task(
        job_id(),
        &s.submit,
        "echo to-out; echo to-err >&2; echo again",
    );
    item.output = Some("out-%A_%a.txt".into());
    let a = s.run(&item);
    let want = "to-out\nto-err\nagain\n";
    s.assert_users_file(&out, want);
    assert_eq!(a.log_paths(), (out.clone(), out.clone()));
    for spooled in ["stdout", "stderr"] {
        assert!(!a.dir().join(spooled).exists(), "{spooled} in the spool");
    }
    // The log port's read, while the attempt is here and once it is acknowledged.
    assert_eq!(read_all(&a.output(false).unwrap()), want);
    assert_eq!(read_all(&a.output(true).unwrap()), want);
    a.acknowledge().unwrap();
    let spool = s.dir.path().join("spool");
    let kept = kept_output(&spool, item.job, a.attempt(), false).expect("kept");
    assert_eq!(kept.path(), out);
    assert_eq!(read_all(&kept), want);
    // The user points the path at a file only root may read: the log port refuses.
    let secret = s.dir.path().join("secret");
    std::fs::write(&secret, "root only\n").unwrap();
    std::fs::remove_file(&out).unwrap();
    std::os::unix::fs::symlink(&secret, &out).unwrap();
    let e = kept.open().unwrap_err();
    assert!(e.to_string().contains("no longer the file"), "{e}");
}

/// `--output` and `--error` apart, with every field: each stream in its own file.
#[test]
fn output_and_error_go_to_their_own_files() {
    let Some(s) = Setup::of("output_and_error_go_to_their_own_files", Need::Root, "oe") else {
        return;
    };
    let id = job_id();
    let mut item = array_task(id, &s.submit, "echo to-out; echo to-err >&2");
    item.output = Some("logs-%x/%j.out".into());
    item.error = Some(format!("{}/%u-%N-%n-%3a-100%%.err", s.submit.display()));
    std::fs::create_dir(s.submit.join("logs-sweep")).unwrap();
    std::os::unix::fs::chown(s.submit.join("logs-sweep"), Some(s.acct.uid), None).unwrap();
    let a = s.run(&item);
    let out = s.submit.join(format!("logs-sweep/{id}.out"));
    let err = s.submit.join(format!("{}-n3-0-007-100%.err", s.acct.name));
    s.assert_users_file(&out, "to-out\n");
    s.assert_users_file(&err, "to-err\n");
    assert_eq!(read_all(&a.output(true).unwrap()), "to-err\n");
    // `--error` alone: stdout stays in the spool.
    let mut item = array_task(job_id(), &s.submit, "echo to-out; echo to-err >&2");
    item.error = Some("only.err".into());
    let a = s.run(&item);
    s.assert_users_file(&s.submit.join("only.err"), "to-err\n");
    assert_eq!(stdout(&a), "to-out\n");
    assert_eq!(a.log_paths().0, a.dir().join("stdout"));
}

/// A file the user cannot create (in a directory it may not write, or through a
/// symlink to a file it may not write) fails the attempt with a reason naming the path
/// and the user, writes nothing there and runs nothing.
#[test]
fn an_unusable_output_fails_the_attempt_naming_the_path_and_the_user() {
    let Some(s) = Setup::of(
        "an_unusable_output_fails_the_attempt_naming_the_path_and_the_user",
        Need::Root,
        "uo",
    ) else {
        return;
    };
    let ran = s.submit.join("ran");
    let script = format!("touch {}", ran.display());

    // Root's directory, which the user may enter but not write.
    let closed = s.dir.path().join("closed");
    std::fs::create_dir(&closed).unwrap();
    // Root's file, which a link in the user's directory points to.
    let secret = s.dir.path().join("secret");
    std::fs::write(&secret, "root only\n").unwrap();
    std::os::unix::fs::symlink(&secret, s.submit.join("link")).unwrap();
    let in_closed = job_id();
    for (id, output, path) in [
        (
            in_closed,
            format!("{}/out-%j", closed.display()),
            closed.join(format!("out-{in_closed}")),
        ),
        (job_id(), "link".to_string(), s.submit.join("link")),
    ] {
        let mut item = array_task(id, &s.submit, &script);
        item.output = Some(output);
        let spec = launch_spec(&s.cfg, &item, true).unwrap();
        let e = s.ex.start(&spec).unwrap_err().to_string();
        let want = format!(
            "cannot create the stdout file {} as user {} (uid {}): Permission denied",
            path.display(),
            s.acct.name,
            s.acct.uid
        );
        assert!(e.contains(&want), "{e}\nwanted: {want}");
        assert!(!ran.exists(), "the job ran");
    }
    assert_eq!(std::fs::read_dir(&closed).unwrap().count(), 0);
    assert_eq!(std::fs::read_to_string(&secret).unwrap(), "root only\n");
}

/// A container's output files are the node's, in the submit directory, as for a
/// process job, and the array's variables reach it too.
#[test]
fn a_containers_output_file_is_on_the_node_in_the_submit_directory() {
    let Some(s) = Setup::of(
        "a_containers_output_file_is_on_the_node_in_the_submit_directory",
        Need::Containers,
        "co",
    ) else {
        return;
    };
    let rootfs = busybox_rootfs(s.dir.path());
    let mut item = array_task(
        job_id(),
        &s.submit,
        "echo task $TRANCHE_ARRAY_TASK_ID of $TRANCHE_ARRAY_JOB_ID; echo err >&2",
    );
    item.image = rootfs.display().to_string();
    item.output = Some("c-%A_%a.txt".into());
    s.run(&item);
    let out = s.submit.join("c-42_7.txt");
    assert_eq!(std::fs::metadata(&out).unwrap().uid(), s.acct.uid);
    // runc copies each stream through a pipe of its own: the order between them is
    // not kept, the lines are.
    let text = std::fs::read_to_string(&out).unwrap();
    let mut lines: Vec<&str> = text.lines().collect();
    lines.sort_unstable();
    assert_eq!(lines, ["err", "task 7 of 42"], "{text:?}");
}
