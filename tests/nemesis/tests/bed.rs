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

impl Up {
    /// The bed's directory, from its `bed TAG DIR` line.
    fn dir(&self) -> PathBuf {
        self.lines
            .iter()
            .find_map(|l| l.strip_prefix("bed "))
            .and_then(|l| l.split(' ').nth(1))
            .map(PathBuf::from)
            .expect("the bed's directory")
    }

    /// SIGTERM: the bed is removed, and nothing of it is left.
    fn down(mut self) {
        nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(self.child.id() as i32),
            nix::sys::signal::Signal::SIGTERM,
        )
        .unwrap();
        assert!(self.child.wait().unwrap().success());
        assert_eq!(common::settle(&self.tag), Vec::<String>::new());
    }
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
    // Each controller's data dir and each agent's spool is on a disk of its own; an
    // agent's GPU ledger is kept off it, beside the bed's configs.
    let mounts = std::fs::read_to_string("/proc/self/mounts").unwrap();
    let disks = mounts
        .lines()
        .filter(|l| l.starts_with("tmpfs ") && l.contains(&format!("/{}-", b.tag)))
        .count();
    assert_eq!(disks, 3 + 2, "{mounts}");
    let dir = b.dir();
    let ledger = std::fs::read_link(dir.join("n0/spool-n0/gpu-ledger.log")).unwrap();
    assert_eq!(ledger, dir.join("ledger-n0.log"));
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
    let live = up(&[]);
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
    live.down();
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

/// Asks the controller at `addr` who leads, from a thread in namespace `ns`, with the
/// certificate `files`: whether it answered.
/// The HTTP status of `GET /api/v1/whoami` on `host`'s HTTPS port with this bearer
/// token, asked with curl from namespace `ns` (the bed's CA at `ca`).
fn https_status(ns: &str, host: &str, ca: &std::path::Path, token: &str) -> u16 {
    let out = Command::new("ip")
        .args([
            "netns",
            "exec",
            ns,
            "curl",
            "-s",
            "-o",
            "/dev/null",
            "-w",
            "%{http_code}",
        ])
        .arg("--cacert")
        .arg(ca)
        .arg("-H")
        .arg(format!("Authorization: Bearer {token}"))
        .arg(format!("https://{host}:7080/api/v1/whoami"))
        .output()
        .expect("curl");
    String::from_utf8_lossy(&out.stdout)
        .trim()
        .parse()
        .unwrap_or(0)
}

fn answers(
    ns: &str,
    addr: std::net::SocketAddr,
    files: &tranche_tls::TlsFiles,
) -> Result<(), String> {
    let (ns, files) = (ns.to_string(), files.clone());
    std::thread::spawn(move || {
        let f = std::fs::File::open(format!("/run/netns/{ns}")).map_err(|e| e.to_string())?;
        // SAFETY: setns on a descriptor held open here; it moves this thread only.
        let rc = unsafe {
            nix::libc::setns(std::os::fd::AsRawFd::as_raw_fd(&f), nix::libc::CLONE_NEWNET)
        };
        assert_eq!(rc, 0, "entering {ns}");
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async {
            let mut c =
                tranche_client::Client::new(vec![addr], &files).map_err(|e| e.to_string())?;
            c.attempt_timeout = Duration::from_secs(3);
            c.retry_for = Duration::from_secs(1);
            let req = tranche_proto::ClientRequest::Read {
                query: tranche_proto::Query::Controllers,
                stale: true,
            };
            match c.request_to(0, &req).await {
                Ok(tranche_proto::Response::Controllers(_)) => Ok(()),
                Ok(other) => Err(format!("{other:?}")),
                Err(e) => Err(e.to_string()),
            }
        })
    })
    .join()
    .unwrap()
}

#[test]
fn a_controller_whose_clock_lags_accepts_an_expired_certificate_only_for_its_lag() {
    let test = "a_controller_whose_clock_lags_accepts_an_expired_certificate_only_for_its_lag";
    if !common::can_run(test) {
        return;
    }
    if Command::new("faketime").arg("--version").output().is_err() {
        common::not_run(test, "needs libfaketime (Debian package faketime)");
        return;
    }
    let b = up(&[]);
    let dir = b.dir();
    let c1: std::net::SocketAddr = "10.77.0.11:7001".parse().unwrap();
    let client_ns = format!("{}-cl", b.tag);
    // Certificates of the bed's CA that expired 1 and 4 minutes ago (valid for an hour
    // before that), each in a directory of its own.
    let out = tempfile::tempdir().unwrap();
    let now = std::time::SystemTime::now();
    let expired = |name: &str, ago_s: u64| {
        tranche_tls::issue_valid_between(
            &dir.join("certs"),
            &out.path().join(name),
            tranche_tls::Role::Admin,
            name,
            now - Duration::from_secs(3600 + ago_s),
            now - Duration::from_secs(ago_s),
        )
        .unwrap()
    };
    let (one, four) = (expired("late1", 60), expired("late4", 240));
    let ok = tranche_tls::TlsFiles::in_dir(&dir.join("certs"), tranche_tls::Role::Admin, "admin");
    let set_clock = |offset: &str| {
        std::fs::write(dir.join("clock-c1"), format!("{offset}\n")).unwrap();
        // libfaketime rereads the file once a second.
        std::thread::sleep(Duration::from_millis(2_500));
    };

    // Bearer tokens of the admin's certificate, minted as of another time (ttl 10 min):
    // one that expired 1 minute ago, one 4 minutes ago, and one issued 3 minutes from
    // now.
    let real = now.duration_since(std::time::UNIX_EPOCH).unwrap().as_secs();
    let ttl = Duration::from_secs(600);
    let token = |at: u64| tranche_tls::token::issue_token_at(&ok, ttl, at).unwrap();
    let (tok1, tok4, ahead) = (token(real - 660), token(real - 840), token(real + 180));
    let https = |tok: &str| https_status(&client_ns, "10.77.0.11", &ok.ca, tok);

    // c1's wall clock 3 minutes behind: its "now" is before the first expiry, after
    // the second. Certificates have no tolerance of their own at expiry, so it accepts
    // exactly what its clock says is valid.
    set_clock("-180");
    answers(&client_ns, c1, &ok).expect("a valid certificate");
    answers(&client_ns, c1, &one).expect("expired 1 min ago, 3 min behind: accepted");
    let e = answers(&client_ns, c1, &four).expect_err("expired 4 min ago: refused");
    assert!(e.contains("expired") || e.contains("certificate"), "{e}");
    // Tokens alike at expiry; a token's issue time may be up to 5 minutes in the
    // controller's future: one issued 3 minutes ahead is 6 minutes ahead of c1.
    assert_eq!(
        https(&tok1),
        200,
        "token expired 1 min ago, c1 3 min behind"
    );
    assert_eq!(https(&tok4), 401, "token expired 4 min ago");
    assert_eq!(https(&ahead), 401, "token issued 6 min in c1's future");
    // Right again: the certificate and the token that expired a minute ago are refused,
    // and the token issued 3 minutes ahead is within the tolerance.
    set_clock("+0");
    let e = answers(&client_ns, c1, &one).expect_err("expired 1 min ago, clock right: refused");
    assert!(e.contains("expired") || e.contains("certificate"), "{e}");
    answers(&client_ns, c1, &ok).expect("a valid certificate");
    assert_eq!(https(&tok1), 401, "token expired 1 min ago, clock right");
    assert_eq!(https(&ahead), 200, "token issued 3 min ahead: within 5 min");

    b.down();
}
