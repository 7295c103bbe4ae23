//! Jobs run as their users' accounts: real accounts made with `useradd` (removed when
//! each test ends), resolved through NSS as the agent does, and run by the process
//! executor and by runc on a busybox rootfs. Checked: `id` (uid, gid, groups), `pwd`,
//! `HOME`/`USER`/`LOGNAME`, who owns the output files, `[users]` mapping, and the
//! refusals (no account, root without `allow_root`, no home).
//!
//! These tests need root and `useradd` (runc, or crun, and a static busybox for the
//! container ones); without them each says so through `exec_common::not_run` and
//! returns, or fails under CI as root.

mod exec_common;

use std::os::unix::fs::MetadataExt;
use std::time::Duration;

use exec_common::*;
use tranche_agent::exec::Executors;
use tranche_agent::users::{resolve, Account, Refusal};

const LONG: Duration = Duration::from_secs(30);

const SCRIPT: &str = "id -u; id -g; id -G; pwd; echo \"$HOME $USER $LOGNAME\"";

/// The lines `SCRIPT` prints for `acct` in `cwd`.
fn expected(acct: &TestAccount, cwd: &str) -> Vec<String> {
    let mut groups = acct.groups.clone();
    groups.sort_unstable();
    groups.dedup();
    vec![
        acct.uid.to_string(),
        acct.gid.to_string(),
        groups
            .iter()
            .map(u32::to_string)
            .collect::<Vec<_>>()
            .join(" "),
        cwd.to_string(),
        format!("{} {} {}", acct.home.display(), acct.name, acct.name),
    ]
}

/// `SCRIPT`'s output with the `id -G` line sorted (the order of groups is NSS's).
fn lines(out: &str) -> Vec<String> {
    let mut l: Vec<String> = out.lines().map(str::to_string).collect();
    if l.len() > 2 {
        let mut g: Vec<u32> = l[2]
            .split_whitespace()
            .filter_map(|n| n.parse().ok())
            .collect();
        g.sort_unstable();
        g.dedup();
        l[2] = g.iter().map(u32::to_string).collect::<Vec<_>>().join(" ");
    }
    l
}

/// A new account with a home and a supplementary group, mapped from `alice` by
/// `[users]`, and what the agent resolves for `alice`.
fn alice_in_a_team(accounts: &mut TestAccounts, tag: &str) -> (TestAccount, Account) {
    let team = accounts.group("team");
    let acct = accounts.user(tag, &[&team], true);
    assert!(acct.groups.len() >= 2, "{acct:?}");
    let cfg = agent_config(&format!("[users]\nalice = \"{}\"\n", acct.name));
    let account = resolve(&cfg, "alice").unwrap();
    (acct, account)
}

/// Runs `SCRIPT` in `image` as `account` to its successful end.
fn run_script(
    ex: &Executors,
    image: impl AsRef<std::path::Path>,
    account: &Account,
) -> tranche_agent::exec::Attempt {
    let mut s = spec(image.as_ref().to_str().unwrap(), &["sh", "-c", SCRIPT]);
    account.apply_to(&mut s, "n3", None).unwrap();
    let a = ex.start(&s).unwrap();
    let st = wait_exit(&a, LONG);
    assert_eq!(st.code, Some(0), "{st:?}; stderr: {}", stderr(&a));
    a
}

#[test]
fn a_process_job_runs_as_the_mapped_account_in_its_home() {
    let test = "a_process_job_runs_as_the_mapped_account_in_its_home";
    if lacks_accounts(test, Need::Root) {
        return;
    }
    init();
    let mut accounts = TestAccounts::new();
    let (acct, account) = alice_in_a_team(&mut accounts, "as");
    assert_eq!(
        (account.uid, account.gid, account.name.as_str()),
        (acct.uid, acct.gid, acct.name.as_str())
    );
    let t = test_dir();
    let ex = Executors::new(&t.path().join("spool")).unwrap();
    let a = run_script(&ex, "host", &account);
    assert_eq!(
        lines(&stdout(&a)),
        expected(&acct, &acct.home.to_string_lossy())
    );
    let (out, err) = a.log_paths();
    for f in [out, err] {
        let m = std::fs::metadata(&f).unwrap();
        assert_eq!((m.uid(), m.gid()), (acct.uid, acct.gid), "{}", f.display());
    }
}

/// A process job runs in the directory it was submitted from where that exists on the
/// node (a shared file system), as its user; where it does not, in the home.
#[test]
fn a_process_job_runs_in_its_submit_directory_where_it_exists() {
    let test = "a_process_job_runs_in_its_submit_directory_where_it_exists";
    if lacks_accounts(test, Need::Root) {
        return;
    }
    init();
    let mut accounts = TestAccounts::new();
    let (acct, account) = alice_in_a_team(&mut accounts, "sd");
    let t = test_dir();
    let ex = Executors::new(&t.path().join("spool")).unwrap();
    let submitted = t.path().join("project");
    std::fs::create_dir(&submitted).unwrap();
    std::os::unix::fs::chown(&submitted, Some(acct.uid), Some(acct.gid)).unwrap();
    let dir = submitted.to_str().unwrap();
    let mut s = spec("host", &["sh", "-c", SCRIPT]);
    account.apply_to(&mut s, "n3", Some(dir)).unwrap();
    let a = ex.start(&s).unwrap();
    assert_eq!(wait_exit(&a, LONG).code, Some(0), "stderr: {}", stderr(&a));
    assert_eq!(lines(&stdout(&a)), expected(&acct, dir));
    // Not on this node: the home.
    let mut s = spec("host", &["sh", "-c", SCRIPT]);
    s.attempt = tranche_agent::exec::AttemptNo(2);
    account
        .apply_to(&mut s, "n3", Some("/nonexistent/shared/project"))
        .unwrap();
    let a = ex.start(&s).unwrap();
    assert_eq!(wait_exit(&a, LONG).code, Some(0), "stderr: {}", stderr(&a));
    assert_eq!(
        lines(&stdout(&a)),
        expected(&acct, &acct.home.to_string_lossy())
    );
}

#[test]
fn an_account_that_cannot_be_used_is_refused_with_its_reason() {
    let test = "an_account_that_cannot_be_used_is_refused_with_its_reason";
    if lacks_accounts(test, Need::Root) {
        return;
    }
    let mut accounts = TestAccounts::new();
    let homeless = accounts.user("nh", &[], false);
    let cfg = agent_config(&format!(
        "[users]\nbob = \"{}\"\ncarol = \"{}-gone\"\n",
        homeless.name, homeless.name
    ));

    let ghost = TestAccounts::unique("ghost");
    let e = resolve(&cfg, &ghost).unwrap_err();
    assert_eq!(
        e.to_string(),
        format!("user {ghost} has no account on node n3")
    );
    let e = resolve(&cfg, "carol").unwrap_err();
    assert!(
        matches!(e, Refusal::NoAccount { .. })
            && e.to_string().contains(&format!("{}-gone", homeless.name)),
        "{e}"
    );

    let e = resolve(&cfg, "root").unwrap_err();
    assert!(
        matches!(e, Refusal::Root { .. }) && e.to_string().contains("allow_root = true"),
        "{e}"
    );
    let root = resolve(&agent_config("allow_root = true"), "root").unwrap();
    assert_eq!((root.uid, root.gid), (0, 0));

    // A process job needs its home on the node; nothing is started without one.
    let account = resolve(&cfg, "bob").unwrap();
    let mut s = spec("host", &["true"]);
    let e = account.apply_to(&mut s, "n3", None).unwrap_err();
    assert!(
        matches!(e, Refusal::NoHome { .. })
            && e.to_string().contains(&format!("/home/{}", homeless.name)),
        "{e}"
    );
}

#[test]
fn a_container_runs_as_the_account_in_its_home_where_the_rootfs_has_it() {
    let test = "a_container_runs_as_the_account_in_its_home_where_the_rootfs_has_it";
    if lacks_accounts(test, Need::Containers) {
        return;
    }
    init();
    let mut accounts = TestAccounts::new();
    let (acct, account) = alice_in_a_team(&mut accounts, "oc");
    let t = test_dir();
    let rootfs = busybox_rootfs(t.path());
    let ex = Executors::new(&t.path().join("spool")).unwrap();

    // No home in the image: the job runs in `/`, still as the account.
    let a = run_script(&ex, &rootfs, &account);
    assert_eq!(lines(&stdout(&a)), expected(&acct, "/"));
    let user = &config_user(&a);
    assert_eq!(user["uid"], acct.uid);
    assert_eq!(user["gid"], acct.gid);
    let (out, _) = a.log_paths();
    assert_eq!(std::fs::metadata(&out).unwrap().uid(), acct.uid);

    // The home in the image: it is the working directory.
    let home = rootfs.join(acct.home.strip_prefix("/").unwrap());
    std::fs::create_dir_all(&home).unwrap();
    std::os::unix::fs::chown(&home, Some(acct.uid), Some(acct.gid)).unwrap();
    let a = run_script(&ex, &rootfs, &account);
    assert_eq!(
        lines(&stdout(&a)),
        expected(&acct, &acct.home.to_string_lossy())
    );
}

/// `process.user` of the attempt's bundle.
fn config_user(a: &tranche_agent::exec::Attempt) -> serde_json::Value {
    let text = std::fs::read_to_string(a.dir().join("bundle/config.json")).unwrap();
    let v: serde_json::Value = serde_json::from_str(&text).unwrap();
    v["process"]["user"].clone()
}
