//! The packages guide (docs/operations/packages.md), run on the test bed's hosts with
//! the built Debian packages: `tranche-nemesis guide --debs DIR`.
//!
//! A bare bed ([`Bed::bare`]) gives each machine of the guide a network namespace and
//! its address: the admin's machine `admin` (10.77.0.2), the controllers `ctl1`-`ctl4`
//! (10.77.0.11-14; `ctl4` replaces `ctl3`) and the GPU nodes `gpu01`, `gpu02`
//! (10.77.0.21-22). In each, a process holds a mount namespace of the host's own
//! ([`MACHINE_DIRS`]): the machine's `/etc`, `/usr`, `/var`, `/root` and `/home` are
//! overlays whose changes land in the host's directory under the bed's, so that
//! `dpkg -i`, `adduser` (the packages' postinst) and `useradd` change that host alone
//! and never the machine; and `/etc/tranche`, `/var/lib/tranche` and
//! `/var/spool/tranche` are bind mounts of the host's own directories, which the
//! packages fill. Every command of the guide then runs in the host's namespaces
//! (`nsenter`), as the guide writes it, with the bed's addresses for 10.0.0.x.
//!
//! There is no systemd in a namespace: a daemon runs its installed unit's `ExecStart`
//! as the unit's `User` and `Group`, with its `UMask` (and `NoNewPrivileges`), in a
//! clean environment; `systemctl stop` is a SIGTERM (the unit's `KillSignal`, to the
//! main process only, as the agent's `KillMode=process` does), and after `dpkg -i` of a
//! new version the run restarts the daemon as the postinst's `try-restart` would. Where
//! the machine runs systemd, the hosts do not see it (a tmpfs hides
//! `/run/systemd`), so the packages' scripts leave the machine's systemd alone.
//!
//! Each step's effect is checked (the controllers' membership, voters and lag; the
//! nodes; the job's state and output; the restored jobs), not only exit statuses.
//! Dropping the run kills its daemons, and the bed's teardown kills everything in the
//! hosts (the mount namespaces die with their last process) and removes the bed's
//! directory.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::fs::File;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitCode, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use tranche_proto::ClusterStatus;

use crate::bed::{Bed, Host};

/// The machine's directories a host sees as overlays of its own: what the packages,
/// their scripts and the guide's commands write to.
const MACHINE_DIRS: [&str; 5] = ["etc", "usr", "var", "root", "home"];
/// The packages' directories, each a bind mount of the host's own directory.
const TRANCHE_DIRS: [&str; 3] = ["/etc/tranche", "/var/lib/tranche", "/var/spool/tranche"];
/// The guide's machines and the last byte of their addresses (10.0.0.x in the guide,
/// 10.77.0.x on the bed); the admin's machine is the bed's client host.
const HOSTS: [(&str, usize); 6] = [
    ("ctl1", 11),
    ("ctl2", 12),
    ("ctl3", 13),
    ("ctl4", 14),
    ("gpu01", 21),
    ("gpu02", 22),
];
const ADMIN: &str = "admin";
/// How long a daemon may take to stop on SIGTERM (the units' `TimeoutStopSec`).
const STOP_TIMEOUT: Duration = Duration::from_secs(20);
/// The admin's CLI config, as the guide writes it.
const ADMIN_CONFIG: &str = "/root/tranche/admin.toml";

/// Why the guide cannot run here, if it cannot (exit status 77: not run).
fn unavailable(debs: &Path) -> Option<String> {
    if let Some(why) = crate::bed::unavailable() {
        return Some(why);
    }
    for tool in ["dpkg", "dpkg-deb", "unshare", "nsenter", "setpriv"] {
        let found = Command::new("sh")
            .args(["-c", &format!("command -v {tool}")])
            .stdout(Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        if !found {
            return Some(format!("the guide's run needs `{tool}` (dpkg, util-linux)"));
        }
    }
    let fs = std::fs::read_to_string("/proc/filesystems").unwrap_or_default();
    if !fs.lines().any(|l| l.ends_with("\toverlay")) {
        return Some("the kernel has no overlay file system (the hosts' /etc, /usr, /var)".into());
    }
    if let Err(e) = Debs::find(debs) {
        return Some(e);
    }
    None
}

/// The three packages of one version, by package name.
#[derive(Debug, Clone)]
struct Debs {
    /// `tranche`, `tranched`, `tranche-agent` -> its file.
    files: BTreeMap<&'static str, PathBuf>,
    version: String,
}

impl Debs {
    /// The newest `<package>_<version>_<arch>.deb` of each package in `dir`, all of
    /// one version.
    fn find(dir: &Path) -> Result<Debs, String> {
        let names: Vec<String> = std::fs::read_dir(dir)
            .map_err(|e| format!("the packages' directory {}: {e}", dir.display()))?
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect();
        let mut files = BTreeMap::new();
        let mut versions = Vec::new();
        for pkg in ["tranche", "tranched", "tranche-agent"] {
            let mut found: Vec<(String, &String)> = names
                .iter()
                .filter_map(|n| {
                    let rest = n.strip_prefix(&format!("{pkg}_"))?.strip_suffix(".deb")?;
                    Some((rest.split('_').next()?.to_string(), n))
                })
                .collect();
            found.sort_by(|a, b| version_cmp(&a.0, &b.0));
            let Some((v, name)) = found.pop() else {
                return Err(format!(
                    "no {pkg}_*.deb in {} (scripts/package.sh builds them)",
                    dir.display()
                ));
            };
            versions.push(v);
            files.insert(pkg, dir.join(name));
        }
        versions.dedup();
        if versions.len() != 1 {
            return Err(format!(
                "the packages in {} are of different versions: {versions:?}",
                dir.display()
            ));
        }
        Ok(Debs {
            files,
            version: versions.remove(0),
        })
    }

    fn file_name(&self, pkg: &str) -> String {
        self.files[pkg]
            .file_name()
            .expect("a file")
            .to_string_lossy()
            .into_owned()
    }
}

/// Orders Debian versions as far as the packages' need: numeric runs as numbers.
fn version_cmp(a: &str, b: &str) -> std::cmp::Ordering {
    fn parts(v: &str) -> Vec<Result<u64, String>> {
        let mut out = Vec::new();
        let mut cur = String::new();
        let mut digits = false;
        for ch in v.chars() {
            if ch.is_ascii_digit() != digits && !cur.is_empty() {
                out.push(cur.parse::<u64>().map_err(|_| cur.clone()));
                cur.clear();
            }
            digits = ch.is_ascii_digit();
            cur.push(ch);
        }
        if !cur.is_empty() {
            out.push(cur.parse::<u64>().map_err(|_| cur.clone()));
        }
        out
    }
    parts(a).cmp(&parts(b))
}

/// The next Debian revision of `version`: `0.1.0-1` -> `0.1.0-2` (`-1` appended when
/// it has none).
fn next_revision(version: &str) -> String {
    match version.rsplit_once('-') {
        Some((up, rev)) => match rev.parse::<u64>() {
            Ok(n) => format!("{up}-{}", n + 1),
            Err(_) => format!("{version}.1"),
        },
        None => format!("{version}-1"),
    }
}

/// How a unit runs its daemon: what systemd would do with its `[Service]`, as far as
/// a namespace allows.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Unit {
    exec_start: String,
    user: String,
    group: Option<String>,
    umask: String,
    no_new_privileges: bool,
}

impl Unit {
    /// Reads a unit file's `ExecStart`, `User`, `Group`, `UMask` and
    /// `NoNewPrivileges` (the last of each; systemd's defaults where absent).
    fn parse(text: &str) -> Result<Unit, String> {
        let mut keys: BTreeMap<&str, &str> = BTreeMap::new();
        let mut section = "";
        for line in text.lines().map(str::trim) {
            if line.starts_with('[') {
                section = line;
            } else if section == "[Service]" && !line.starts_with('#') {
                if let Some((k, v)) = line.split_once('=') {
                    keys.insert(k.trim(), v.trim());
                }
            }
        }
        let exec_start = keys
            .get("ExecStart")
            .ok_or("the unit has no ExecStart in [Service]")?
            .to_string();
        Ok(Unit {
            exec_start,
            user: keys.get("User").unwrap_or(&"root").to_string(),
            group: keys.get("Group").map(|g| g.to_string()),
            umask: keys.get("UMask").unwrap_or(&"0022").to_string(),
            no_new_privileges: keys.get("NoNewPrivileges") == Some(&"yes"),
        })
    }

    /// The shell command that runs it: its umask, then its user (setpriv), then
    /// `ExecStart`.
    fn command(&self) -> String {
        let mut cmd = format!("umask {} && exec ", self.umask);
        if self.user != "root" || self.group.is_some() {
            let group = self.group.as_deref().unwrap_or(&self.user);
            let _ = write!(
                cmd,
                "setpriv --reuid={} --regid={group} --init-groups ",
                self.user
            );
            if self.no_new_privileges {
                cmd += "--no-new-privs ";
            }
        }
        cmd + &self.exec_start
    }
}

/// One machine of the guide: its network namespace, and the process that holds its
/// mount namespace.
struct Machine {
    host: Host,
    /// Its directory under the bed's: the overlays' layers, the bind mounts' sources,
    /// `inbox` (what is copied to it), its daemon's log.
    dir: PathBuf,
    holder: Child,
    daemon: Option<Child>,
}

impl Machine {
    fn inbox(&self) -> PathBuf {
        self.dir.join("inbox")
    }

    /// The host's own directory that `path` (one of [`TRANCHE_DIRS`]) is, seen from
    /// outside.
    fn own(&self, path: &str) -> PathBuf {
        self.dir
            .join(path.trim_start_matches('/').replace('/', "-"))
    }

    /// What the host's own directory `path` (one of [`TRANCHE_DIRS`]) holds, sorted.
    fn entries(&self, path: &str) -> Result<Vec<String>, String> {
        let dir = self.own(path);
        let mut names: Vec<String> = std::fs::read_dir(&dir)
            .map_err(|e| format!("{}: {e}", dir.display()))?
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        Ok(names)
    }

    fn log(&self) -> PathBuf {
        self.dir.join("daemon.log")
    }
}

/// The guide's run: the bed, its machines, the transcript of every command.
struct Guide {
    machines: BTreeMap<String, Machine>,
    transcript: File,
    transcript_path: PathBuf,
    debs: Debs,
    /// The repacked higher version, for the upgrade.
    upgrade: Debs,
    policy: PathBuf,
    started: Instant,
    /// While [`Guide::wait`] polls, commands are not written to the transcript (its
    /// last error is).
    polling: bool,
    /// Steps begun so far.
    steps: usize,
    /// Fail on purpose once this many steps have passed.
    fail_after: Option<usize>,
    /// Dropped last: its teardown kills whatever is left in the hosts.
    bed: Bed,
}

impl Drop for Guide {
    fn drop(&mut self) {
        for m in self.machines.values_mut() {
            if let Some(mut d) = m.daemon.take() {
                let _ = d.kill();
                let _ = d.wait();
            }
            let _ = m.holder.kill();
            let _ = m.holder.wait();
        }
    }
}

/// The holder of a host's mount namespace: it makes the overlays and bind mounts,
/// says `up`, and waits (its name is its host's directory, so that a leftover is
/// found). `$1` is the host's directory.
const HOLDER: &str = r#"set -eu
h=$1
for d in DIRS; do
  mount -t overlay "trb-$d" -o "lowerdir=/$d,upperdir=$h/ovl/$d/up,workdir=$h/ovl/$d/work" "/$d"
done
# The machine's systemd, if it runs one, is not this host's.
if [ -d /run/systemd/system ]; then mount -t tmpfs -o size=1m trb-nosystemd /run/systemd; fi
for d in TRANCHE; do
  mkdir -p "$d"
  mount --bind "$h/$(echo "${d#/}" | tr / -)" "$d"
done
echo up
exec -a "$h/holder" sleep infinity
"#;

impl Guide {
    /// Makes the bed, each host's directories and mount namespace, and the repacked
    /// upgrade.
    fn up(
        debs: Debs,
        policy: PathBuf,
        keep: bool,
        fail_after: Option<usize>,
    ) -> Result<Guide, String> {
        let bed = Bed::bare(&HOSTS, ADMIN, keep)?;
        let transcript_path = bed.dir.join("transcript.txt");
        let transcript = File::create(&transcript_path)
            .map_err(|e| format!("{}: {e}", transcript_path.display()))?;
        let upgrade_dir = bed.dir.join("upgrade");
        std::fs::create_dir_all(&upgrade_dir).map_err(|e| e.to_string())?;
        let upgrade = repack(&debs, &upgrade_dir)?;
        let mut g = Guide {
            machines: BTreeMap::new(),
            transcript,
            transcript_path,
            debs,
            upgrade,
            policy,
            started: Instant::now(),
            polling: false,
            steps: 0,
            fail_after,
            bed,
        };
        let hosts: Vec<Host> = g.bed.hosts().into_iter().cloned().collect();
        for h in hosts {
            let m = g.machine(h)?;
            let name = m.host.name.clone();
            g.machines.insert(name.clone(), m);
            // The hosts' system users (the tranche user) come from 900 up: no daemon of
            // the bed runs under a uid that the machine gives its own next system user
            // (whose `userdel` would refuse while such a process runs).
            g.on(
                &name,
                "[ ! -e /etc/adduser.conf ] || printf 'FIRST_SYSTEM_UID=900\\nFIRST_SYSTEM_GID=900\\n' >>/etc/adduser.conf",
            )?;
        }
        Ok(g)
    }

    /// Host `h`'s directories and the holder of its mount namespace.
    fn machine(&self, h: Host) -> Result<Machine, String> {
        let dir = self.bed.dir.join(&h.name);
        let mk = |p: &Path| std::fs::create_dir_all(p).map_err(|e| format!("{}: {e}", p.display()));
        for d in MACHINE_DIRS {
            mk(&dir.join("ovl").join(d).join("up"))?;
            mk(&dir.join("ovl").join(d).join("work"))?;
        }
        for d in TRANCHE_DIRS {
            mk(&dir.join(d.trim_start_matches('/').replace('/', "-")))?;
        }
        mk(&dir.join("inbox"))?;
        let script = HOLDER
            .replace("DIRS", &MACHINE_DIRS.join(" "))
            .replace("TRANCHE", &TRANCHE_DIRS.join(" "));
        let mut holder = Command::new("ip")
            .args([
                "netns",
                "exec",
                &h.ns,
                "unshare",
                "--mount",
                "--propagation",
            ])
            .args(["private", "bash", "-c", &script, "holder"])
            .arg(&dir)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| format!("the mount namespace of {}: {e}", h.name))?;
        let mut out = holder.stdout.take().expect("piped");
        let mut buf = [0u8; 3];
        let ok = std::io::Read::read_exact(&mut out, &mut buf).is_ok() && &buf == b"up\n";
        if !ok {
            let _ = holder.kill();
            let o = holder.wait_with_output().map_err(|e| e.to_string())?;
            return Err(format!(
                "the mount namespace of {} could not be made: {}",
                h.name,
                String::from_utf8_lossy(&o.stderr).trim()
            ));
        }
        Ok(Machine {
            host: h,
            dir,
            holder,
            daemon: None,
        })
    }

    fn m(&self, name: &str) -> &Machine {
        &self.machines[name]
    }

    fn note(&mut self, text: &str) {
        if !self.polling {
            let _ = writeln!(self.transcript, "{text}");
        }
    }

    /// A step of the guide begins.
    fn step(&mut self, title: &str) -> Result<(), String> {
        if self.fail_after == Some(self.steps) {
            return Err(format!(
                "failing on purpose after {} steps (--fail-after)",
                self.steps
            ));
        }
        self.steps += 1;
        let line = format!(
            "guide: [{:5.1} s] {title}",
            self.started.elapsed().as_secs_f64()
        );
        println!("{line}");
        self.note(&format!("\n## {title}"));
        Ok(())
    }

    /// Checked: says so.
    fn ok(&mut self, what: &str) {
        let t = self.started.elapsed().as_secs_f64();
        println!("  ok [{t:5.1} s]: {what}");
        self.note(&format!("# ok: {what}"));
    }

    /// `nsenter` into host `name`'s mount and network namespaces, with a clean
    /// environment.
    fn enter(&self, name: &str) -> Command {
        let pid = self.m(name).holder.id().to_string();
        let mut c = Command::new("nsenter");
        c.args(["-t", &pid, "-m", "-n", "--"])
            .env_clear()
            .env(
                "PATH",
                "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
            )
            .env("HOME", "/root")
            .env("LANG", "C.UTF-8")
            .stdin(Stdio::null());
        c
    }

    /// Runs `script` (bash, `set -euo pipefail`) on host `name`, in `/root`; what it
    /// printed, or an error with its output.
    fn on(&mut self, name: &str, script: &str) -> Result<String, String> {
        self.note(&format!("[{name}]$ {}", script.trim()));
        let out = self
            .enter(name)
            .args([
                "bash",
                "-c",
                &format!("set -euo pipefail; cd /root\n{script}"),
            ])
            .output()
            .map_err(|e| format!("nsenter into {name}: {e}"))?;
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        let err = String::from_utf8_lossy(&out.stderr).into_owned();
        self.note(text.trim_end());
        if !err.trim().is_empty() {
            self.note(err.trim_end());
        }
        if !out.status.success() {
            return Err(format!(
                "on {name}, `{}` failed ({}): {}{}",
                script.trim(),
                out.status,
                text.trim(),
                err.trim()
            ));
        }
        Ok(text)
    }

    /// `tranche ARGS` on the admin's machine, with the admin's config.
    fn cli(&mut self, args: &str) -> Result<String, String> {
        self.on(
            ADMIN,
            &format!("export TRANCHE_CONFIG={ADMIN_CONFIG}\ntranche {args}"),
        )
    }

    /// Polls `f` every 300 ms until it is Ok, for at most `limit`.
    fn wait<T>(
        &mut self,
        what: &str,
        limit: Duration,
        mut f: impl FnMut(&mut Guide) -> Result<T, String>,
    ) -> Result<T, String> {
        let t0 = Instant::now();
        self.note(&format!("# waiting for {what}"));
        self.polling = true;
        let res = loop {
            match f(self) {
                Ok(v) => break Ok(v),
                Err(e) if t0.elapsed() >= limit => {
                    break Err(format!("{what}: not within {limit:?}: {e}"));
                }
                Err(_) => std::thread::sleep(Duration::from_millis(300)),
            }
        };
        self.polling = false;
        if let Err(e) = &res {
            self.note(&format!("# {e}"));
        }
        res
    }

    /// Copies files to host `to`'s inbox, as `scp` would: `from`'s `paths` (relative to
    /// its `dir`), read on `from` itself.
    fn copy(&mut self, from: &str, dir: &str, paths: &[String], to: &str) -> Result<(), String> {
        let inbox = self.m(to).inbox();
        self.on(
            from,
            &format!("cd {dir} && cp {} {}/", paths.join(" "), inbox.display()),
        )?;
        Ok(())
    }

    /// Puts the packages (of `debs`) into host `to`'s inbox (hard links).
    fn ship(&self, to: &str, debs: &Debs) -> Result<(), String> {
        let inbox = self.m(to).inbox();
        for f in debs.files.values() {
            let dst = inbox.join(f.file_name().expect("a file"));
            if !dst.exists() {
                std::fs::hard_link(f, &dst)
                    .or_else(|_| std::fs::copy(f, &dst).map(|_| ()))
                    .map_err(|e| format!("{} to {}: {e}", f.display(), dst.display()))?;
            }
        }
        Ok(())
    }

    /// Starts the daemon of host `name` as its installed unit `unit` says.
    fn start(&mut self, name: &str, unit: &str) -> Result<(), String> {
        if self.m(name).daemon.is_some() {
            return Err(format!("{name}: its daemon runs already"));
        }
        let text = self.on(name, &format!("cat /usr/lib/systemd/system/{unit}"))?;
        let u = Unit::parse(&text).map_err(|e| format!("{name}: {unit}: {e}"))?;
        let cmd = u.command();
        self.note(&format!("[{name}]# start {unit}: {cmd}"));
        let log = self.m(name).log();
        let out = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log)
            .map_err(|e| format!("{}: {e}", log.display()))?;
        let err = out.try_clone().map_err(|e| e.to_string())?;
        let child = self
            .enter(name)
            .args(["bash", "-c", &cmd])
            .stdout(out)
            .stderr(err)
            .spawn()
            .map_err(|e| format!("starting {unit} on {name}: {e}"))?;
        self.machines.get_mut(name).expect("a host").daemon = Some(child);
        Ok(())
    }

    /// `systemctl stop`: SIGTERM to the daemon's process alone, then its exit status
    /// (an error when it does not stop within [`STOP_TIMEOUT`]).
    fn stop(&mut self, name: &str) -> Result<ExitStatus, String> {
        self.note(&format!("[{name}]# stop (SIGTERM)"));
        let m = self.machines.get_mut(name).expect("a host");
        let Some(mut child) = m.daemon.take() else {
            return Err(format!("{name}: no daemon runs"));
        };
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(child.id() as i32),
            nix::sys::signal::Signal::SIGTERM,
        );
        let t0 = Instant::now();
        loop {
            match child.try_wait() {
                Ok(Some(st)) => return Ok(st),
                Ok(None) if t0.elapsed() < STOP_TIMEOUT => {
                    std::thread::sleep(Duration::from_millis(50))
                }
                _ => {
                    let _ = child.kill();
                    let _ = child.wait();
                    return Err(format!(
                        "{name}: the daemon did not stop within {STOP_TIMEOUT:?}"
                    ));
                }
            }
        }
    }

    /// Stops host `name`'s daemon, which must exit with status 0.
    fn stop_clean(&mut self, name: &str) -> Result<(), String> {
        let st = self.stop(name)?;
        if !st.success() {
            return Err(format!("{name}: the daemon stopped with {st} on SIGTERM"));
        }
        Ok(())
    }

    /// The daemon of host `name` has ended by itself: its exit status.
    fn ended(&mut self, name: &str) -> Result<Option<ExitStatus>, String> {
        let m = self.machines.get_mut(name).expect("a host");
        let Some(child) = m.daemon.as_mut() else {
            return Err(format!("{name}: no daemon was started"));
        };
        match child.try_wait() {
            Ok(Some(st)) => {
                m.daemon = None;
                Ok(Some(st))
            }
            Ok(None) => Ok(None),
            Err(e) => Err(e.to_string()),
        }
    }

    fn daemon_log(&self, name: &str) -> String {
        std::fs::read_to_string(self.m(name).log()).unwrap_or_default()
    }

    /// `tranche controllers --json`.
    fn controllers(&mut self) -> Result<ClusterStatus, String> {
        let out = self.cli("controllers --json")?;
        serde_json::from_str(out.trim())
            .map_err(|e| format!("tranche controllers --json: {e}: {out}"))
    }

    /// Waits until the controllers are `ids`, all voters, with a leader and every
    /// member's LAG 0 (the guide's "wait until its LAG is 0").
    fn wait_members(&mut self, ids: &[u64]) -> Result<ClusterStatus, String> {
        let want: Vec<u64> = ids.to_vec();
        let st = self.wait("the controllers", Duration::from_secs(60), |g| {
            let st = g.controllers()?;
            let have: Vec<u64> = st.members.iter().map(|m| m.member.id).collect();
            if have != want {
                return Err(format!("members {have:?}, not {want:?}"));
            }
            if st.leader.is_none() {
                return Err("no leader".into());
            }
            for m in &st.members {
                if !m.voter {
                    return Err(format!("{} is not a voter", m.member.name));
                }
                if m.lag != Some(0) {
                    return Err(format!("{}'s lag is {:?}", m.member.name, m.lag));
                }
            }
            Ok(st)
        })?;
        self.ok(&format!(
            "controllers {:?}: leader {}, every one a voter with LAG 0",
            ids,
            st.leader.unwrap_or_default()
        ));
        Ok(st)
    }

    /// `tranche nodes`, as (node, state, GPUs) rows.
    fn nodes(&mut self) -> Result<Vec<(String, String, String)>, String> {
        let out = self.cli("nodes")?;
        Ok(out
            .lines()
            .skip(1)
            .filter_map(|l| {
                let w: Vec<&str> = l.split_whitespace().collect();
                Some((
                    w.first()?.to_string(),
                    w.get(1)?.to_string(),
                    w.last()?.to_string(),
                ))
            })
            .collect())
    }

    /// Waits until `tranche nodes` lists exactly `want`, each in service with 8 h100:
    /// `idle` (none used), or with `busy` also `mix` or `alloc` (a job runs there).
    fn wait_nodes(&mut self, want: &[&str], busy: bool) -> Result<(), String> {
        let want: Vec<String> = want.iter().map(|s| s.to_string()).collect();
        let states: &[&str] = if busy {
            &["idle", "mix", "alloc"]
        } else {
            &["idle"]
        };
        self.wait("the nodes", Duration::from_secs(60), |g| {
            let rows = g.nodes()?;
            let names: Vec<String> = rows.iter().map(|r| r.0.clone()).collect();
            if names != want {
                return Err(format!("nodes {names:?}"));
            }
            let in_service = |r: &(String, String, String)| {
                states.contains(&r.1.as_str())
                    && r.2.starts_with("h100:")
                    && r.2.ends_with("/8")
                    && (busy || r.2 == "h100:0/8")
            };
            match rows.iter().find(|r| !in_service(r)) {
                Some(r) => Err(format!("{r:?}")),
                None => Ok(()),
            }
        })?;
        self.ok(&format!(
            "tranche nodes lists {want:?}, {} with 8 h100",
            states.join(" or ")
        ));
        Ok(())
    }

    /// The jobs `tranche jobs --json` lists: id -> state.
    fn jobs(&mut self) -> Result<BTreeMap<u64, String>, String> {
        let out = self.cli("jobs --json")?;
        let v: serde_json::Value =
            serde_json::from_str(out.trim()).map_err(|e| format!("tranche jobs --json: {e}"))?;
        Ok(v.as_array()
            .map(|a| {
                a.iter()
                    .filter_map(|j| Some((j["id"].as_u64()?, j["state"].as_str()?.to_string())))
                    .collect()
            })
            .unwrap_or_default())
    }

    /// Alice submits `cmd` as the guide does (share `infra`, one GPU); the job's id.
    fn submit(&mut self, cmd: &str) -> Result<u64, String> {
        let out = self.on(
            ADMIN,
            &format!(
                "export TRANCHE_CONFIG=/root/tranche/alice.toml\n\
                 tranche submit --share infra --gpus 1 -- sh -c '{cmd}'"
            ),
        )?;
        out.trim()
            .strip_prefix("Submitted job ")
            .and_then(|id| id.trim().parse().ok())
            .ok_or_else(|| format!("tranche submit said {out:?}"))
    }

    /// Waits until job `id` has SUCCEEDED (a failed or cancelled one is an error).
    fn wait_succeeded(&mut self, id: u64) -> Result<(), String> {
        self.wait(&format!("job {id}"), Duration::from_secs(60), |g| {
            match g.jobs()?.get(&id).map(String::as_str) {
                Some("SUCCEEDED") => Ok(Ok(())),
                Some(s @ ("FAILED" | "CANCELLED")) => Ok(Err(format!("job {id} ended {s}"))),
                other => Err(format!("job {id} is {other:?}")),
            }
        })??;
        self.ok(&format!("job {id} SUCCEEDED"));
        Ok(())
    }

    /// The `sed` edits that make the shipped example config use the bed's addresses
    /// (10.77.0.x for the guide's 10.0.0.x).
    fn bed_addresses(file: &str) -> String {
        format!("sed -i 's/10\\.0\\.0\\./10.77.0./g' {file}")
    }

    /// Step 2 on controller `n` (1-based): the packages, its certificate, its config;
    /// `join`: a new member (`join = true`). Not started.
    fn install_controller(&mut self, n: u64, join: bool) -> Result<(), String> {
        let name = format!("ctl{n}");
        let inbox = self.m(&name).inbox().display().to_string();
        let (cli, ctl) = (
            self.debs.file_name("tranche"),
            self.debs.file_name("tranched"),
        );
        self.ship(&name, &self.debs.clone())?;
        let files = [
            "ca.pem",
            &format!("controller-{name}.pem"),
            &format!("controller-{name}.key"),
        ]
        .map(String::from);
        self.copy(ADMIN, "/root/tranche/certs", &files, &name)?;
        self.on(&name, &format!("cd {inbox}\ndpkg -i {cli} {ctl}"))?;
        if n == 1 {
            self.refused_without_certificates(&name)?;
        }
        self.on(
            &name,
            &format!(
                "cd {inbox}\n\
                 install -m 0644 ca.pem controller-{name}.pem /etc/tranche/certs/\n\
                 install -m 0600 -o tranche -g tranche controller-{name}.key /etc/tranche/certs/"
            ),
        )?;
        // The edits the guide names: the fields before [[peers]] and the [tls] files
        // (ctl1's example is right as it is, but for the bed's addresses).
        let mut edit = Self::bed_addresses("/etc/tranche/controller.toml");
        if n != 1 {
            edit += &format!(
                "\nsed -i -E '1,/^\\[/ {{ s/^id = 1( |$)/id = {n}\\1/; s/^name = \"ctl1\"/name = \"{name}\"/; \
                 s/^(peer_addr|client_addr) = \"10\\.77\\.0\\.11:/\\1 = \"10.77.0.1{n}:/ }}' /etc/tranche/controller.toml\n\
                 sed -i 's|/etc/tranche/certs/controller-ctl1\\.|/etc/tranche/certs/controller-{name}.|' /etc/tranche/controller.toml"
            );
        }
        if join {
            edit += "\nsed -i -E '1,/^\\[/ s/^# join = true( |$)/join = true\\1/' /etc/tranche/controller.toml";
        }
        self.on(&name, &edit)?;
        // What the edits made: this controller's fields, before [[peers]].
        let head = self.on(&name, "sed -n '1,/^\\[/p' /etc/tranche/controller.toml")?;
        let want = [
            format!("id = {n}"),
            format!("name = \"{name}\""),
            format!("peer_addr = \"10.77.0.1{n}:7101\""),
            format!("client_addr = \"10.77.0.1{n}:7100\""),
        ];
        for w in &want {
            if !head.lines().any(|l| l.starts_with(w.as_str())) {
                return Err(format!(
                    "{name}: controller.toml has no `{w}` after the edits:\n{head}"
                ));
            }
        }
        if join != head.lines().any(|l| l.starts_with("join = true")) {
            return Err(format!(
                "{name}: controller.toml's join is not {join}:\n{head}"
            ));
        }
        let modes = self.on(
            &name,
            "stat -c '%n %U %G %a' /var/lib/tranche /etc/tranche/certs /etc/tranche/certs/*.key",
        )?;
        let expect = [
            "/var/lib/tranche tranche tranche 700".to_string(),
            "/etc/tranche/certs root tranche 750".to_string(),
            format!("/etc/tranche/certs/controller-{name}.key tranche tranche 600"),
        ];
        for e in &expect {
            if !modes.lines().any(|l| l == e) {
                return Err(format!("{name}: expected `{e}`, found:\n{modes}"));
            }
        }
        self.ok(&format!(
            "{name}: tranched {} installed, its key tranche's 0600, /var/lib/tranche 0700, config edited",
            self.debs.version
        ));
        Ok(())
    }

    /// The guide's "example configs": started from the shipped config before its
    /// certificates are there, the controller of host `name` stops with an error that
    /// names the missing file (its log's last line) and leaves `/var/lib/tranche`
    /// empty.
    fn refused_without_certificates(&mut self, name: &str) -> Result<(), String> {
        self.start(name, "tranched.service")?;
        let st = self.wait("the controller to refuse", Duration::from_secs(20), |g| {
            g.ended(name)?.ok_or_else(|| "still running".to_string())
        })?;
        let log = self.daemon_log(name);
        let last = log.lines().last().unwrap_or_default();
        let want =
            "controller failed: cannot read certificate /etc/tranche/certs/controller-ctl1.pem";
        if st.success() || !last.contains(want) {
            return Err(format!(
                "{name}: without its certificates the controller ended with {st}, its log's last line {last:?}"
            ));
        }
        let made = self.m(name).entries("/var/lib/tranche")?;
        if !made.is_empty() {
            return Err(format!(
                "{name}: the refused start made {made:?} in /var/lib/tranche"
            ));
        }
        self.ok(&format!(
            "{name}: before its certificates, the controller refuses to start ({st}), naming the missing file, and makes no data dir"
        ));
        Ok(())
    }

    /// Step 3 on GPU node `node`: the package, its certificate, its config (fake
    /// inventory), the spool mounted nosuid,nodev, alice's account; started.
    fn install_agent(&mut self, node: &str) -> Result<(), String> {
        let inbox = self.m(node).inbox().display().to_string();
        let pkg = self.debs.file_name("tranche-agent");
        let addr = self.m(node).host.addr;
        self.ship(node, &self.debs.clone())?;
        let files = [
            "ca.pem",
            &format!("agent-{node}.pem"),
            &format!("agent-{node}.key"),
        ]
        .map(String::from);
        self.copy(ADMIN, "/root/tranche/certs", &files, node)?;
        self.on(
            node,
            &format!(
                "cd {inbox}\n\
                 dpkg -i {pkg}\n\
                 install -m 0644 ca.pem agent-{node}.pem /etc/tranche/certs/\n\
                 install -m 0600 agent-{node}.key /etc/tranche/certs/"
            ),
        )?;
        // node, controllers, logs_addr, [tls]; the fake inventory for [units]' NVML.
        let edit = format!(
            "{}\n\
             sed -i -E 's/^node = \"gpu01\"/node = \"{node}\"/; \
             s/^logs_addr = \"0\\.0\\.0\\.0:7102\"/logs_addr = \"{addr}:7102\"/; \
             s/^inventory = \"nvml\"/inventory = \"fake\"\\nfake = \"8 x h100\"/; \
             s|/etc/tranche/certs/agent-gpu01\\.|/etc/tranche/certs/agent-{node}.|' /etc/tranche/agent.toml\n\
             # The spool nosuid,nodev (security.md), as the fstab line in agent.toml does.\n\
             mount --bind /var/spool/tranche /var/spool/tranche\n\
             mount -o remount,bind,nosuid,nodev /var/spool/tranche\n\
             # Alice's account on the node ([users] maps alice to asmith).\n\
             useradd --create-home asmith",
            Self::bed_addresses("/etc/tranche/agent.toml")
        );
        self.on(node, &edit)?;
        let text = self.on(node, "cat /etc/tranche/agent.toml")?;
        let parsed: toml::Value =
            toml::from_str(&text).map_err(|e| format!("{node}: agent.toml: {e}"))?;
        let want = [
            ("node", node.to_string()),
            ("logs_addr", format!("{addr}:7102")),
            ("inventory", "fake".into()),
            ("fake", "8 x h100".into()),
        ];
        for (k, v) in &want {
            if parsed.get(k).and_then(|x| x.as_str()) != Some(v.as_str()) {
                return Err(format!(
                    "{node}: agent.toml's {k} is not {v:?} after the edits"
                ));
            }
        }
        let opts = self.on(node, "findmnt -no OPTIONS /var/spool/tranche")?;
        // The last line is the mount on top, the one that applies.
        let opts: Vec<&str> = opts.lines().last().unwrap_or("").split(',').collect();
        if !opts.contains(&"nosuid") || !opts.contains(&"nodev") {
            return Err(format!(
                "{node}: the spool is mounted {opts:?}, not nosuid,nodev"
            ));
        }
        self.start(node, "tranche-agent.service")?;
        self.ok(&format!(
            "{node}: tranche-agent {} installed, configured, its spool nosuid,nodev, started",
            self.debs.version
        ));
        Ok(())
    }

    /// `dpkg -i OPTS` of the upgrade's package `pkg` on host `name`, then (for the
    /// postinst's `try-restart`, which has no systemd here) a restart of its daemon of
    /// unit `unit`; checks the version installed, and that the host's edited example
    /// config is kept as it was with the new one beside it (`.dpkg-dist`).
    fn upgrade(
        &mut self,
        name: &str,
        pkg: &str,
        opts: &str,
        unit: Option<&str>,
    ) -> Result<(), String> {
        let up = self.upgrade.clone();
        self.ship(name, &up)?;
        let inbox = self.m(name).inbox().display().to_string();
        let file = up.file_name(pkg);
        let conf = CONFFILES
            .iter()
            .find(|(p, _)| *p == pkg)
            .map(|(_, c)| format!("/{c}"));
        let before = match &conf {
            Some(c) => self.on(name, &format!("cat {c}"))?,
            None => String::new(),
        };
        self.on(name, &format!("cd {inbox} && dpkg -i {opts} {file}"))?;
        if let Some(c) = &conf {
            let after = self.on(name, &format!("cat {c}"))?;
            let dist = self.on(name, &format!("tail -1 {c}.dpkg-dist"))?;
            if after != before || dist.trim() != release_line(&up.version) {
                return Err(format!(
                    "{name}: after the upgrade, {c} is {} and {c}.dpkg-dist ends with {:?}",
                    if after == before { "kept" } else { "changed" },
                    dist.trim()
                ));
            }
        }
        if let Some(unit) = unit {
            self.stop_clean(name)?;
            self.start(name, unit)?;
        }
        self.expect_version(name, pkg, &up.version)
    }

    /// `dpkg -P pkg` on host `name`, which must leave its directory `dir` (one of
    /// [`TRANCHE_DIRS`], a bind mount that stays) empty.
    fn purge(&mut self, name: &str, pkg: &str, dir: &str) -> Result<(), String> {
        self.on(name, &format!("dpkg -P {pkg}"))?;
        let left = self.m(name).entries(dir)?;
        if !left.is_empty() {
            return Err(format!("dpkg -P {pkg} on {name} left {left:?} in {dir}"));
        }
        Ok(())
    }

    /// Host `name`'s package `pkg` is installed at `version`.
    fn expect_version(&mut self, name: &str, pkg: &str, version: &str) -> Result<(), String> {
        let v = self.on(name, &format!("dpkg-query -W -f='${{Version}}' {pkg}"))?;
        if v.trim() != version {
            return Err(format!("{name}: {pkg} is {v}, not {version}"));
        }
        Ok(())
    }
}

/// The packages' example configs (conffiles), by package.
const CONFFILES: [(&str, &str); 2] = [
    ("tranched", "etc/tranche/controller.toml"),
    ("tranche-agent", "etc/tranche/agent.toml"),
];

/// The line a new release's example config ends with.
fn release_line(version: &str) -> String {
    format!("# the example as shipped with {version}")
}

/// Makes the example config `conf` of the unpacked package `tree` end with
/// [`release_line`] (and its checksum in `DEBIAN/md5sums` follow), as a new release's
/// changed example would.
fn changed_example(tree: &Path, conf: &str, version: &str) -> Result<(), String> {
    let path = tree.join(conf);
    let mut text =
        std::fs::read_to_string(&path).map_err(|e| format!("{}: {e}", path.display()))?;
    text += &format!("{}\n", release_line(version));
    std::fs::write(&path, &text).map_err(|e| format!("{}: {e}", path.display()))?;
    let sums = tree.join("DEBIAN/md5sums");
    if let Ok(list) = std::fs::read_to_string(&sums) {
        let out = Command::new("md5sum")
            .arg(&path)
            .output()
            .map_err(|e| format!("md5sum: {e}"))?;
        let sum = String::from_utf8_lossy(&out.stdout);
        let sum = sum.split_whitespace().next().unwrap_or_default();
        let list: String = list
            .lines()
            .map(|l| match l.ends_with(&format!("  {conf}")) {
                true => format!("{sum}  {conf}\n"),
                false => format!("{l}\n"),
            })
            .collect();
        std::fs::write(&sums, list).map_err(|e| format!("{}: {e}", sums.display()))?;
    }
    Ok(())
}

/// The same packages under the next revision (`dpkg-deb -R`, then `-b`), as a new
/// release would come: the same binaries, and example configs that end with a line
/// of their own ([`changed_example`]), into `dir`.
fn repack(debs: &Debs, dir: &Path) -> Result<Debs, String> {
    let new = next_revision(&debs.version);
    let mut files = BTreeMap::new();
    for (pkg, f) in &debs.files {
        let tree = dir.join(format!("{pkg}-tree"));
        let run = |args: &[&str]| -> Result<(), String> {
            let out = Command::new("dpkg-deb")
                .args(args)
                .output()
                .map_err(|e| format!("dpkg-deb: {e}"))?;
            if out.status.success() {
                Ok(())
            } else {
                Err(format!(
                    "dpkg-deb {}: {}",
                    args.join(" "),
                    String::from_utf8_lossy(&out.stderr).trim()
                ))
            }
        };
        let t = tree.to_string_lossy().into_owned();
        run(&["-R", &f.to_string_lossy(), &t])?;
        if let Some(conf) = CONFFILES.iter().find(|(p, _)| p == pkg).map(|(_, c)| c) {
            changed_example(&tree, conf, &new)?;
        }
        let control = tree.join("DEBIAN/control");
        let text =
            std::fs::read_to_string(&control).map_err(|e| format!("{}: {e}", control.display()))?;
        let text = text
            .lines()
            .map(|l| match l.strip_prefix("Version: ") {
                Some(_) => format!("Version: {new}"),
                None => l.to_string(),
            })
            .collect::<Vec<_>>()
            .join("\n")
            + "\n";
        std::fs::write(&control, text).map_err(|e| format!("{}: {e}", control.display()))?;
        let name = f.file_name().expect("a file").to_string_lossy().replacen(
            &format!("_{}_", debs.version),
            &format!("_{new}_"),
            1,
        );
        let out = dir.join(name);
        // gzip at its fastest: the default xz takes 9 s a package on one core.
        run(&[
            "-b",
            "-Zgzip",
            "-z1",
            "--root-owner-group",
            &t,
            &out.to_string_lossy(),
        ])?;
        let _ = std::fs::remove_dir_all(&tree);
        files.insert(*pkg, out);
    }
    Ok(Debs {
        files,
        version: new,
    })
}

/// `tranche-nemesis guide`. Exit status: 0 passed; 1 a step failed (and the teardown
/// left nothing); 2 the bed could not be made; 3 the teardown left something of the
/// bed, or the machine is not as it was; 77 not run (saying why). `fail_after`: fail
/// on purpose once that many steps have passed, with the daemons up (a test of the
/// teardown).
pub fn run_guide(
    debs_dir: &Path,
    policy: &Path,
    keep: bool,
    fail_after: Option<usize>,
) -> ExitCode {
    if let Some(why) = unavailable(debs_dir) {
        eprintln!("tranche-nemesis guide: NOT RUN: {why}");
        return ExitCode::from(77);
    }
    let debs = match Debs::find(debs_dir) {
        Ok(d) => d,
        Err(e) => {
            eprintln!("tranche-nemesis guide: NOT RUN: {e}");
            return ExitCode::from(77);
        }
    };
    let before = machine_state();
    let mut g = match Guide::up(debs, policy.to_path_buf(), keep, fail_after) {
        Ok(g) => g,
        Err(e) => {
            eprintln!("tranche-nemesis guide: the test bed could not be made: {e}");
            return ExitCode::from(2);
        }
    };
    let (tag, dir) = (g.bed.tag.clone(), g.bed.dir.clone());
    let result = steps(&mut g);
    if let Err(e) = &result {
        eprintln!("tranche-nemesis guide: FAILED: {e}");
        report_failure(&g);
    }
    let secs = g.started.elapsed().as_secs_f64();
    drop(g);
    let mut left = crate::bed::leftovers(Some(&tag));
    if !keep && dir.exists() {
        left.push(format!("directory {}", dir.display()));
    }
    let after = machine_state();
    if after != before {
        left.push(format!(
            "a changed machine: before {before:?}, after {after:?}"
        ));
    }
    if !left.is_empty() {
        eprintln!("tranche-nemesis guide: FAILED: the run left {left:?}");
        return ExitCode::from(3);
    }
    println!("guide: the bed is gone and the machine is as it was");
    if result.is_err() {
        return ExitCode::from(1);
    }
    println!("guide: passed in {secs:.1} s");
    ExitCode::SUCCESS
}

/// What the run must leave as it found it on the machine: the packages' paths and the
/// accounts the hosts made.
fn machine_state() -> Vec<String> {
    let mut out = Vec::new();
    for p in [
        "/etc/tranche",
        "/var/lib/tranche",
        "/var/spool/tranche",
        "/usr/bin/tranche",
        "/usr/bin/tranched",
        "/usr/bin/tranche-agent",
        "/home/asmith",
    ] {
        out.push(format!("{p}: {}", Path::new(p).exists()));
    }
    let passwd = std::fs::read_to_string("/etc/passwd").unwrap_or_default();
    for user in ["tranche", "asmith"] {
        let has = passwd.lines().any(|l| l.starts_with(&format!("{user}:")));
        out.push(format!("user {user}: {has}"));
    }
    out
}

/// On a failure: the transcript's end and each daemon's log's end, to stderr.
fn report_failure(g: &Guide) {
    let tail = |text: &str, n: usize| {
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(n)..].join("\n")
    };
    let t = std::fs::read_to_string(&g.transcript_path).unwrap_or_default();
    eprintln!("--- the transcript's last lines ---\n{}", tail(&t, 60));
    for (name, m) in &g.machines {
        let log = std::fs::read_to_string(m.log()).unwrap_or_default();
        if !log.is_empty() {
            eprintln!(
                "--- {name}'s daemon log, last lines ---\n{}",
                tail(&log, 15)
            );
        }
    }
}

/// The guide's steps, in its order.
fn steps(g: &mut Guide) -> Result<(), String> {
    let cli = g.debs.file_name("tranche");
    let admin_inbox = g.m(ADMIN).inbox().display().to_string();
    g.ship(ADMIN, &g.debs.clone())?;
    let policy_copy = g.m(ADMIN).inbox().join("policy.toml");
    std::fs::copy(&g.policy, &policy_copy)
        .map_err(|e| format!("{} to the admin's machine: {e}", g.policy.display()))?;

    g.step("1. Certificates, on the admin's machine")?;
    let mut script = format!(
        "dpkg -i {admin_inbox}/{cli}\n\
         mkdir -p /root/tranche && cd /root/tranche\n\
         tranche certs init --dir certs --cluster lab\n"
    );
    for n in 1..=3 {
        let _ = writeln!(
            script,
            "tranche certs issue --dir certs --role controller --name ctl{n} --host 10.77.0.1{n}"
        );
    }
    script += "tranche certs issue --dir certs --role agent --name gpu01\n\
               tranche certs issue --dir certs --role admin --name root\n\
               ls certs";
    let listed = g.on(ADMIN, &script)?;
    for f in [
        "ca.key",
        "controller-ctl3.key",
        "agent-gpu01.pem",
        "admin-root.pem",
    ] {
        if !listed.lines().any(|l| l == f) {
            return Err(format!("certs holds no {f}: {listed}"));
        }
    }
    g.ok("the CA and the certificates of ctl1-3, gpu01 and root, in /root/tranche/certs");

    g.step("2. The controllers")?;
    for n in 1..=3 {
        g.install_controller(n, false)?;
    }
    for n in 1..=3 {
        g.start(&format!("ctl{n}"), "tranched.service")?;
    }
    g.on(
        ADMIN,
        &format!(
            "cat >{ADMIN_CONFIG} <<'EOF'\n\
             controllers = [\"10.77.0.11:7100\", \"10.77.0.12:7100\", \"10.77.0.13:7100\"]\n\
             [tls]\n\
             ca = \"/root/tranche/certs/ca.pem\"\n\
             cert = \"/root/tranche/certs/admin-root.pem\"\n\
             key = \"/root/tranche/certs/admin-root.key\"\n\
             EOF"
        ),
    )?;
    g.wait_members(&[1, 2, 3])?;
    // The guide's `tranche controllers`: a row per member, one leader, two voters.
    let table = g.cli("controllers")?;
    let roles: Vec<&str> = table
        .lines()
        .filter_map(|l| {
            let w: Vec<&str> = l.split_whitespace().collect();
            (w.len() >= 5 && w[1].starts_with("ctl")).then(|| w[4])
        })
        .collect();
    let leaders = roles.iter().filter(|r| **r == "leader").count();
    let voters = roles.iter().filter(|r| **r == "voter").count();
    if (leaders, voters) != (1, 2) {
        return Err(format!(
            "tranche controllers printed roles {roles:?}:\n{table}"
        ));
    }
    for n in 1..=3 {
        let name = format!("ctl{n}");
        let st = g.on(&name, "stat -c '%U %G %a' /var/lib/tranche/controller")?;
        if st.trim() != "tranche tranche 700" {
            return Err(format!(
                "{name}: its data dir is {}, not tranche tranche 700",
                st.trim()
            ));
        }
    }
    g.ok("each controller made its data dir, the tranche user's, 0700");

    g.step("3. The GPU nodes")?;
    g.install_agent("gpu01")?;
    g.wait_nodes(&["gpu01"], false)?;

    g.step("4. The policy, and a first job")?;
    g.on(
        ADMIN,
        &format!(
            "cd /root/tranche && cp {admin_inbox}/policy.toml .\n\
             export TRANCHE_CONFIG={ADMIN_CONFIG}\n\
             tranche apply -f policy.toml --dry-run\n\
             tranche apply -f policy.toml\n\
             tranche certs issue --dir certs --role user --name alice\n\
             sed -e 's/admin-root/user-alice/g' {ADMIN_CONFIG} >/root/tranche/alice.toml"
        ),
    )?;
    let first = g.submit("echo hello from $(id -un) on GPU $CUDA_VISIBLE_DEVICES")?;
    g.wait_succeeded(first)?;
    // The guide's `tranche jobs`: the job, its share and CD.
    let table = g.cli("jobs")?;
    let row: Vec<&str> = table
        .lines()
        .map(|l| l.split_whitespace().collect::<Vec<_>>())
        .find(|w| w.first() == Some(&first.to_string().as_str()))
        .unwrap_or_default();
    if row.get(1..6) != Some(&["training", "infra", "job", "alice", "CD"][..]) {
        return Err(format!(
            "tranche jobs lists job {first} as {row:?}:\n{table}"
        ));
    }
    let logs = g.cli(&format!("logs {first}"))?;
    if logs.trim() != "hello from asmith on GPU 0" {
        return Err(format!("tranche logs {first} printed {logs:?}"));
    }
    g.ok("tranche logs: \"hello from asmith on GPU 0\"");

    g.step("Adding an agent")?;
    g.on(
        ADMIN,
        "cd /root/tranche && tranche certs issue --dir certs --role agent --name gpu02",
    )?;
    g.install_agent("gpu02")?;
    g.wait_nodes(&["gpu01", "gpu02"], false)?;

    g.step("Replacing a controller")?;
    g.cli("controllers remove --id 3")?;
    let st = g.wait("ctl3 to stop by itself", Duration::from_secs(30), |g| {
        g.ended("ctl3")?.ok_or_else(|| "still running".to_string())
    })?;
    if !st.success() {
        return Err(format!("the removed ctl3 exited with {st}, not 0"));
    }
    if !g
        .daemon_log("ctl3")
        .contains("this controller was removed from the cluster; stopping")
    {
        return Err("ctl3's log does not say it was removed".into());
    }
    g.ok("the removed ctl3 stopped by itself with status 0, saying why");
    g.wait_members(&[1, 2])?;
    g.on(
        ADMIN,
        "cd /root/tranche && tranche certs issue --dir certs --role controller --name ctl4 --host 10.77.0.14",
    )?;
    g.install_controller(4, true)?;
    g.start("ctl4", "tranched.service")?;
    g.wait("ctl4 to serve", Duration::from_secs(30), |g| {
        match g.daemon_log("ctl4").contains("controller serving id=4") {
            true => Ok(()),
            false => Err("its log does not say `controller serving id=4` yet".to_string()),
        }
    })?;
    g.cli(
        "controllers add --id 4 --name ctl4 --peer-addr 10.77.0.14:7101 --client-addr 10.77.0.14:7100",
    )?;
    g.wait_members(&[1, 2, 4])?;
    for node in ["gpu01", "gpu02"] {
        g.on(
            node,
            "sed -i 's/10\\.77\\.0\\.13:7100/10.77.0.14:7100/' /etc/tranche/agent.toml",
        )?;
        g.stop_clean(node)?;
        g.start(node, "tranche-agent.service")?;
        g.wait_nodes(&["gpu01", "gpu02"], false)?;
    }
    g.on(
        ADMIN,
        &format!("sed -i 's/10\\.77\\.0\\.13:7100/10.77.0.14:7100/' {ADMIN_CONFIG}"),
    )?;
    g.purge("ctl3", "tranched", "/var/lib/tranche")?;
    g.ok("ctl4 replaced ctl3; the agents and the CLI name ctl4; ctl3's data purged");

    g.step("Backing up the controllers' data")?;
    // A job before the backups, which the restore keeps.
    let kept = g.submit("echo before the backup")?;
    g.wait_succeeded(kept)?;
    for name in ["ctl1", "ctl2", "ctl4"] {
        g.on(name, "install -d -m 0700 /var/backups/tranche")?;
        g.stop_clean(name)?;
        g.on(
            name,
            &format!("tar -C /var/lib/tranche -cpf /var/backups/tranche/{name}.tar controller"),
        )?;
        g.start(name, "tranched.service")?;
        g.wait_members(&[1, 2, 4])?;
    }
    // A job after the backups, which the restore forgets.
    let forgotten = g.submit("echo after the backup")?;
    g.wait_succeeded(forgotten)?;

    g.step("Restoring the controllers' data")?;
    for name in ["ctl1", "ctl2", "ctl4"] {
        g.stop_clean(name)?;
    }
    for node in ["gpu01", "gpu02"] {
        g.stop_clean(node)?;
        g.on(
            node,
            "mv /var/spool/tranche/logs /var/spool/tranche/logs.before-restore",
        )?;
    }
    for name in ["ctl1", "ctl2", "ctl4"] {
        g.on(
            name,
            &format!(
                "rm -rf /var/lib/tranche/controller\n\
                 tar -C /var/lib/tranche -xpf /var/backups/tranche/{name}.tar"
            ),
        )?;
    }
    for name in ["ctl1", "ctl2", "ctl4"] {
        g.start(name, "tranched.service")?;
    }
    for node in ["gpu01", "gpu02"] {
        g.start(node, "tranche-agent.service")?;
    }
    g.wait_members(&[1, 2, 4])?;
    let jobs = g.jobs()?;
    if jobs.get(&first).map(String::as_str) != Some("SUCCEEDED")
        || jobs.get(&kept).map(String::as_str) != Some("SUCCEEDED")
    {
        return Err(format!(
            "after the restore, jobs {first} and {kept} are not both SUCCEEDED: {jobs:?}"
        ));
    }
    if jobs.contains_key(&forgotten) {
        return Err(format!("after the restore, job {forgotten} (submitted after the backups) is still there: {jobs:?}"));
    }
    g.ok(&format!(
        "the restored controllers answer jobs {first} and {kept} (SUCCEEDED) and have forgotten job {forgotten}"
    ));
    g.wait_nodes(&["gpu01", "gpu02"], false)?;
    let again = g.submit("echo submitted again")?;
    if again != forgotten {
        return Err(format!(
            "the job submitted again got id {again}, not {forgotten}"
        ));
    }
    g.wait_succeeded(again)?;
    let out = g.cli(&format!("logs {again}"))?;
    if out.trim() != "submitted again" {
        return Err(format!(
            "tranche logs {again} printed {out:?}, not the new job's output"
        ));
    }
    g.ok(&format!(
        "job {again}, submitted again under the reused id, ran and printed its own output"
    ));

    g.step("Upgrading one host at a time")?;
    let up = g.upgrade.clone();
    for name in ["ctl1", "ctl2", "ctl4"] {
        g.upgrade(
            name,
            "tranched",
            "--force-confold",
            Some("tranched.service"),
        )?;
        g.wait_members(&[1, 2, 4])?;
        // The cluster takes writes between one host and the next.
        g.cli("drain gpu02 --reason upgrading && tranche resume gpu02")?;
    }
    g.ok(&format!(
        "the controllers upgraded to {} one at a time, each edited controller.toml kept and the new example beside it",
        up.version
    ));
    // A job that runs across its agent's restart: it waits for a file in its user's
    // home, made once both agents run the new version.
    let across = g.submit("while [ ! -e /home/asmith/go ]; do sleep 0.2; done; echo went on")?;
    g.wait(
        &format!("job {across} to run"),
        Duration::from_secs(30),
        |g| match g.jobs()?.get(&across).map(String::as_str) {
            Some("RUNNING") => Ok(()),
            other => Err(format!("{other:?}")),
        },
    )?;
    for node in ["gpu01", "gpu02"] {
        g.upgrade(
            node,
            "tranche-agent",
            "--force-confold",
            Some("tranche-agent.service"),
        )?;
        g.wait_nodes(&["gpu01", "gpu02"], true)?;
    }
    if g.jobs()?.get(&across).map(String::as_str) != Some("RUNNING") {
        return Err(format!(
            "job {across} did not keep running across the agents' restarts"
        ));
    }
    for node in ["gpu01", "gpu02"] {
        g.on(node, "touch /home/asmith/go")?;
    }
    g.wait_succeeded(across)?;
    let out = g.cli(&format!("logs {across}"))?;
    if out.trim() != "went on" {
        return Err(format!("tranche logs {across} printed {out:?}"));
    }
    g.ok(&format!(
        "the agents upgraded one at a time; job {across} ran on across its agent's restart"
    ));
    for name in [ADMIN, "ctl1", "ctl2", "ctl4"] {
        g.upgrade(name, "tranche", "", None)?;
    }
    g.ok(&format!(
        "the CLI upgraded to {} wherever it is installed",
        up.version
    ));

    g.step("Removing an agent")?;
    g.cli("drain gpu02 --reason \"leaving the cluster\"")?;
    g.stop_clean("gpu02")?;
    g.purge("gpu02", "tranche-agent", "/var/spool/tranche")?;
    // The certificates the admin put there stay; the configs go, the new example
    // the upgrade put beside agent.toml too.
    let etc = g.m("gpu02").entries("/etc/tranche")?;
    if etc != ["certs"] {
        return Err(format!(
            "dpkg -P tranche-agent on gpu02 left {etc:?} in /etc/tranche, not the certs alone"
        ));
    }
    g.ok("gpu02 drained and purged: its spool is empty, /etc/tranche holds its certs alone");
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_unit_runs_as_its_user_with_its_umask() {
        let text = "[Unit]\nDescription=x\n[Service]\nType=notify\n\
            ExecStart=/usr/bin/tranched --config /etc/tranche/controller.toml\n\
            User=tranche\nGroup=tranche\nUMask=0077\nNoNewPrivileges=yes\n\
            # User=root\n[Install]\nUser=nobody\n";
        let u = Unit::parse(text).unwrap();
        assert_eq!(u.user, "tranche");
        assert_eq!(
            u.command(),
            "umask 0077 && exec setpriv --reuid=tranche --regid=tranche --init-groups \
             --no-new-privs /usr/bin/tranched --config /etc/tranche/controller.toml"
        );
        let agent =
            Unit::parse("[Service]\nExecStart=/usr/bin/tranche-agent run\nUser=root\nUMask=0077\n")
                .unwrap();
        assert_eq!(
            agent.command(),
            "umask 0077 && exec /usr/bin/tranche-agent run"
        );
        assert!(Unit::parse("[Service]\nUser=root\n").is_err());
    }

    #[test]
    fn versions_and_revisions() {
        assert_eq!(next_revision("0.1.0-1"), "0.1.0-2");
        assert_eq!(next_revision("0.1.0-9"), "0.1.0-10");
        assert_eq!(next_revision("0.1.0"), "0.1.0-1");
        assert_eq!(
            version_cmp("0.1.0-10", "0.1.0-9"),
            std::cmp::Ordering::Greater
        );
        assert_eq!(version_cmp("0.2.0-1", "0.10.0-1"), std::cmp::Ordering::Less);
    }

    #[test]
    fn the_packages_are_found_by_name_and_version() {
        let dir = tempfile::tempdir().unwrap();
        for f in [
            "tranche_0.1.0-1_amd64.deb",
            "tranched_0.1.0-1_amd64.deb",
            "tranche-agent_0.1.0-1_amd64.deb",
        ] {
            std::fs::write(dir.path().join(f), "").unwrap();
        }
        let d = Debs::find(dir.path()).unwrap();
        assert_eq!(d.version, "0.1.0-1");
        assert_eq!(d.file_name("tranche"), "tranche_0.1.0-1_amd64.deb");
        assert_eq!(
            d.file_name("tranche-agent"),
            "tranche-agent_0.1.0-1_amd64.deb"
        );
        std::fs::write(dir.path().join("tranched_0.1.0-2_amd64.deb"), "").unwrap();
        let e = Debs::find(dir.path()).unwrap_err();
        assert!(e.contains("different versions"), "{e}");
        std::fs::remove_file(dir.path().join("tranche_0.1.0-1_amd64.deb")).unwrap();
        let e = Debs::find(dir.path()).unwrap_err();
        assert!(e.contains("no tranche_*.deb"), "{e}");
    }
}
