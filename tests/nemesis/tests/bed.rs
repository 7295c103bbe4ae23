//! The test bed: `tranche-nemesis bed` brings up controllers and agents on hosts of
//! their own (network namespaces) and leaves nothing behind: not after Ctrl-C, not
//! after a failure, and, once swept, not after the run was killed outright.
//!
//! It needs root, `ip` and `nft`. Without them it says NOT RUN on stderr and passes,
//! except under `CI=true`, where it fails.

mod common;

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

fn nemesis() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_tranche-nemesis"))
}

fn daemons() -> (PathBuf, PathBuf) {
    common::binaries(&nemesis())
}

fn bed(extra: &[&str]) -> Command {
    let (c, a) = daemons();
    let mut cmd = Command::new(nemesis());
    cmd.args(["bed", "--agents", "2"])
        .args(extra)
        .env("TRANCHED", c)
        .env("TRANCHE_AGENT", a)
        .env_remove("CARGO");
    cmd
}

/// A bed being brought up: its process and the lines it printed once ready.
struct Up {
    child: Child,
    tag: String,
    lines: Vec<String>,
}

/// Starts `tranche-nemesis bed` and waits (up to 90 s) for its `ready` line.
fn up(extra: &[&str]) -> Up {
    let mut child = bed(extra).stdout(Stdio::piped()).spawn().expect("spawn");
    let tag = format!("trb-{}", child.id());
    let out = child.stdout.take().unwrap();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(out).lines().map_while(Result::ok) {
            let _ = tx.send(line);
        }
    });
    let mut lines = Vec::new();
    while let Ok(line) = rx.recv_timeout(Duration::from_secs(90)) {
        let ready = line == "ready";
        lines.push(line);
        if ready {
            return Up { child, tag, lines };
        }
    }
    let _ = child.kill();
    let _ = child.wait();
    panic!("the bed did not come up within 90 s: {lines:?}");
}

fn sh(program: &str, args: &[&str]) -> String {
    let out = Command::new(program).args(args).output().expect(program);
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The machine's own interfaces (names only), which a bed must never change.
fn own_links() -> Vec<String> {
    let mut v: Vec<String> = sh("ip", &["-o", "link", "show"])
        .lines()
        .filter_map(|l| l.split(':').nth(1).map(|s| s.trim().to_string()))
        .collect();
    v.sort();
    v
}

#[test]
fn the_bed_runs_on_hosts_of_its_own_and_ctrl_c_removes_it() {
    if !common::can_run("the_bed_runs_on_hosts_of_its_own_and_ctrl_c_removes_it") {
        return;
    }
    let before = own_links();
    let mut b = up(&[]);
    let hosts: Vec<Vec<&str>> = b
        .lines
        .iter()
        .filter_map(|l| l.strip_prefix("host "))
        .map(|l| l.split(' ').collect())
        .collect();
    // 3 controllers, 2 agents, the client: each its own namespace and address.
    assert_eq!(hosts.len(), 6, "{:?}", b.lines);
    for h in &hosts {
        let (name, addr, ns) = (h[0], h[1], h[2]);
        assert_eq!(ns, format!("{}-{name}", b.tag));
        assert!(addr.starts_with("10.77.0."), "{addr}");
        let a = sh("ip", &["-n", ns, "-o", "-4", "addr", "show", "dev", "eth0"]);
        assert!(a.contains(&format!("{addr}/24")), "{ns}: {a}");
        // No route out: the bed's /24 only.
        let routes = sh("ip", &["-n", ns, "route", "show"]);
        assert!(!routes.contains("default"), "{ns}: {routes}");
        assert_eq!(routes.lines().count(), 1, "{ns}: {routes}");
        let pids = sh("ip", &["netns", "pids", ns]);
        if name != "cl" {
            assert!(!pids.trim().is_empty(), "nothing runs in {ns}");
        }
    }
    // The switch holds the bridge and the hosts' other ends; the machine's own
    // namespace gained nothing.
    let sw = sh(
        "ip",
        &["-n", &format!("{}-sw", b.tag), "-o", "link", "show"],
    );
    assert!(sw.contains("br0"), "{sw}");
    assert_eq!(sw.matches("master br0").count(), 6, "{sw}");
    assert_eq!(own_links(), before, "the machine's own interfaces changed");
    // Each controller's data dir is on a disk of its own.
    let mounts = std::fs::read_to_string("/proc/self/mounts").unwrap();
    let disks = mounts
        .lines()
        .filter(|l| l.starts_with("tmpfs ") && l.contains(&format!("/{}-", b.tag)))
        .count();
    assert_eq!(disks, 3, "{mounts}");
    assert!(b
        .lines
        .iter()
        .any(|l| l.starts_with("export TRANCHE_CONFIG=")));

    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(b.child.id() as i32),
        nix::sys::signal::Signal::SIGINT,
    )
    .unwrap();
    let st = b.child.wait().unwrap();
    assert!(st.success(), "Ctrl-C: {st}");
    assert_eq!(common::settle(&b.tag), Vec::<String>::new());
    assert_eq!(own_links(), before);
}

#[test]
fn a_failure_or_a_kill_leaves_nothing_once_swept() {
    if !common::can_run("a_failure_or_a_kill_leaves_nothing_once_swept") {
        return;
    }
    // A panic with the bed up: the guard removes it all while the panic unwinds.
    let mut b = up(&["--fail-when-up"]);
    let st = b.child.wait().unwrap();
    assert!(!st.success(), "the injected failure fails the command");
    assert_eq!(
        common::settle(&b.tag),
        Vec::<String>::new(),
        "after a panic"
    );

    // SIGKILL: nothing can run; the next sweep (every bed starts with one) removes
    // what the dead run left, and leaves a live bed alone.
    let mut dead = up(&[]);
    let mut live = up(&[]);
    dead.child.kill().unwrap();
    dead.child.wait().unwrap();
    assert!(
        common::left(&dead.tag)
            .iter()
            .any(|l| l.starts_with("namespace")),
        "a killed run leaves its namespaces"
    );
    let out = Command::new(nemesis()).arg("sweep").output().unwrap();
    assert!(out.status.success());
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(
        said.contains(&format!("namespace {}-c1", dead.tag)),
        "{said}"
    );
    assert_eq!(
        common::settle(&dead.tag),
        Vec::<String>::new(),
        "after the sweep"
    );
    assert!(
        common::left(&live.tag)
            .iter()
            .any(|l| l.starts_with("namespace")),
        "the sweep removed a live bed"
    );
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(live.child.id() as i32),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
    assert!(live.child.wait().unwrap().success());
    assert_eq!(common::settle(&live.tag), Vec::<String>::new());
}

/// A scratch network namespace (not a bed's: its name is not `trb-`), deleted when
/// dropped, also when the test fails.
struct Scratch(String);

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = Command::new("ip").args(["netns", "del", &self.0]).status();
    }
}

#[test]
fn a_delay_rule_left_behind_is_found_and_swept() {
    if !common::can_run("a_delay_rule_left_behind_is_found_and_swept") {
        return;
    }
    if Command::new("iptables").arg("-V").output().is_err() {
        common::not_run(
            "a_delay_rule_left_behind_is_found_and_swept",
            "needs iptables (Debian package iptables)",
        );
        return;
    }
    // The rule a delay adds, as a run whose process is gone (pid 1 is no nemesis) would
    // leave it, in a namespace of this test's: sweep and its check look at the
    // namespace they run in.
    let ns = Scratch(format!("trq-{}", std::process::id()));
    assert!(Command::new("ip")
        .args(["netns", "add", &ns.0])
        .status()
        .unwrap()
        .success());
    let rule = [
        "OUTPUT",
        "-d",
        "192.0.2.1/32",
        "-m",
        "comment",
        "--comment",
        "trb-1-delay",
        "-j",
        "NFQUEUE",
        "--queue-num",
        "7",
        "--queue-bypass",
    ];
    let st = Command::new("ip")
        .args(["netns", "exec", &ns.0, "iptables", "-w", "-A"])
        .args(rule)
        .status()
        .unwrap();
    assert!(st.success(), "adding the rule");
    let in_ns = |args: &[&str]| {
        Command::new("ip")
            .args(["netns", "exec", &ns.0])
            .arg(nemesis())
            .args(args)
            .output()
            .unwrap()
    };
    let out = in_ns(&["sweep", "--check"]);
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(!out.status.success(), "the check fails: {said}");
    assert!(
        said.contains("left behind: iptables rule -A OUTPUT -d 192.0.2.1/32")
            && said.contains("trb-1-delay"),
        "{said}"
    );
    let out = in_ns(&["sweep"]);
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(said.contains("removed iptables rule -A OUTPUT"), "{said}");
    let save = Command::new("ip")
        .args(["netns", "exec", &ns.0, "iptables-save"])
        .output()
        .unwrap();
    let save = String::from_utf8_lossy(&save.stdout);
    assert!(!save.contains("trb-1-delay"), "{save}");
}
