//! A local cluster of real `tranched` processes on 127.0.0.1, for tests, benchmarks
//! and `tranche dev`: certificates, configs, data dirs and logs under one directory.

pub mod demo;
pub mod demo_image;
mod error;
mod ports;
pub mod rig;

pub use error::LocalError;
pub use ports::Ports;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use tranche_client::Client;
use tranche_proto::{ClusterStatus, Member, Query, Response};
use tranche_tls::{Role, TlsFiles};

/// Settings of a local cluster.
#[derive(Debug, Clone)]
pub struct LocalOptions {
    /// The `tranched` binary.
    pub tranched: PathBuf,
    /// Extra TOML for every controller's config, placed before its `[[peers]]` and
    /// `[tls]` tables: top-level keys first, then tables such as `[raft]`.
    pub extra_config: String,
    pub fault_injection: bool,
    /// `TRANCHE_LOG` for the controllers.
    pub log_filter: String,
    /// Fixed ports instead of free ones: controller `i` (from 1) listens on
    /// `base_port + 2i` (peers) and `base_port + 2i + 1` (clients). A data dir records
    /// its members' addresses, so a cluster whose data dirs are kept (a fixture) needs
    /// the same ports every time.
    pub base_port: Option<u16>,
    /// How long issued certificates are valid, in days.
    pub cert_days: u32,
    /// Where agents keep their spools (`spool-<node>` under it); `None`: the cluster's
    /// directory.
    pub spool_root: Option<PathBuf>,
    /// Serve the HTTPS API on every controller (`http_addr`, a port the cluster holds).
    pub http: bool,
}

impl LocalOptions {
    pub fn new(tranched: PathBuf) -> LocalOptions {
        LocalOptions {
            tranched,
            extra_config: String::new(),
            fault_injection: true,
            log_filter: std::env::var("TRANCHE_LOG").unwrap_or_else(|_| "info,raft=warn".into()),
            base_port: None,
            cert_days: 30,
            spool_root: None,
            http: true,
        }
    }
}

/// The `tranched` binary beside the running executable (both are built into the same
/// target directory), or `$TRANCHED`.
pub fn find_tranched() -> PathBuf {
    if let Ok(p) = std::env::var("TRANCHED") {
        return PathBuf::from(p);
    }
    let exe = std::env::current_exe().expect("current executable");
    let dir = exe.parent().expect("executable directory");
    for cand in [dir.join("tranched"), dir.join("../tranched")] {
        if cand.exists() {
            return cand;
        }
    }
    PathBuf::from("tranched")
}

/// The `tranche-agent` binary beside the running executable, or `$TRANCHE_AGENT`.
pub fn find_agent() -> PathBuf {
    if let Ok(p) = std::env::var("TRANCHE_AGENT") {
        return PathBuf::from(p);
    }
    let exe = std::env::current_exe().expect("current executable");
    let dir = exe.parent().expect("executable directory");
    for cand in [dir.join("tranche-agent"), dir.join("../tranche-agent")] {
        if cand.exists() {
            return cand;
        }
    }
    PathBuf::from("tranche-agent")
}

/// How often the waits below look again.
pub const POLL_INTERVAL: Duration = Duration::from_millis(50);

/// Calls `check` until it returns `Ok`, for at most `timeout`; a check still running
/// at the deadline is abandoned. `Err` from `check` means "not yet" and says what it
/// saw; the error returned at the deadline ([`LocalError::Timeout`]) names `what` and
/// that last sight.
pub async fn wait_for<T>(
    what: &str,
    timeout: Duration,
    mut check: impl AsyncFnMut() -> Result<T, String>,
) -> Result<T, LocalError> {
    let deadline = tokio::time::Instant::now() + timeout;
    let mut last = String::from("not checked yet");
    loop {
        match tokio::time::timeout_at(deadline, check()).await {
            Ok(Ok(v)) => return Ok(v),
            Ok(Err(seen)) => last = seen,
            Err(_) => {}
        }
        if tokio::time::Instant::now() >= deadline {
            return Err(LocalError::Timeout {
                what: what.to_string(),
                after: timeout,
                last,
            });
        }
        // The poll interval; the deadline above bounds the whole wait.
        tokio::time::sleep(POLL_INTERVAL).await;
    }
}

/// [`wait_for`] with the failure as text, for callers whose failures are text.
pub async fn wait_until<T>(
    what: &str,
    timeout: Duration,
    check: impl AsyncFnMut() -> Result<T, String>,
) -> Result<T, String> {
    Ok(wait_for(what, timeout, check).await?)
}

/// [`wait_for`] for blocking checks (a command run to completion, a child process).
/// The deadline is looked at between checks, so each check must end by itself.
pub fn wait_for_blocking<T>(
    what: &str,
    timeout: Duration,
    mut check: impl FnMut() -> Result<T, String>,
) -> Result<T, LocalError> {
    let deadline = Instant::now() + timeout;
    loop {
        let last = match check() {
            Ok(v) => return Ok(v),
            Err(seen) => seen,
        };
        if Instant::now() >= deadline {
            return Err(LocalError::Timeout {
                what: what.to_string(),
                after: timeout,
                last,
            });
        }
        // The poll interval; the deadline above bounds the whole wait.
        std::thread::sleep(POLL_INTERVAL);
    }
}

/// [`wait_for_blocking`] with the failure as text, for callers whose failures are text.
pub fn wait_until_blocking<T>(
    what: &str,
    timeout: Duration,
    check: impl FnMut() -> Result<T, String>,
) -> Result<T, String> {
    Ok(wait_for_blocking(what, timeout, check)?)
}

pub struct LocalController {
    pub member: Member,
    pub config: PathBuf,
    pub data_dir: PathBuf,
    pub log: PathBuf,
    pub child: Option<Child>,
    /// Where its HTTPS API listens, when it serves one.
    pub http_addr: Option<String>,
}

/// A `tranche-agent` process with fake GPUs.
pub struct LocalAgent {
    pub node: String,
    pub config: PathBuf,
    pub spool: PathBuf,
    pub log: PathBuf,
    pub child: Option<Child>,
}

pub struct LocalCluster {
    pub dir: PathBuf,
    pub certs: PathBuf,
    pub opts: LocalOptions,
    pub controllers: Vec<LocalController>,
    pub agents: Vec<LocalAgent>,
    /// The sockets the cluster holds for its processes' ports.
    pub ports: Ports,
}

impl LocalCluster {
    /// Writes a CA, certificates and configs for `n` founding controllers (ids 1..=n).
    /// Nothing is started.
    pub fn create(dir: &Path, n: usize, opts: LocalOptions) -> Result<LocalCluster, LocalError> {
        let certs = dir.join("certs");
        std::fs::create_dir_all(&certs).map_err(LocalError::io(&certs))?;
        tranche_tls::init_ca(&certs, "local", true)?;
        let mut cluster = LocalCluster {
            dir: dir.to_path_buf(),
            certs,
            opts,
            controllers: Vec::new(),
            agents: Vec::new(),
            ports: Ports::default(),
        };
        let base = cluster.opts.base_port;
        let members: Vec<Member> = (1..=n as u64)
            .map(|id| Self::new_member(&mut cluster.ports, id, base))
            .collect::<Result<_, _>>()?;
        for m in &members {
            cluster.add_config(m.clone(), &members, false)?;
        }
        cluster.issue(Role::Admin, "admin")?;
        Ok(cluster)
    }

    /// A cluster whose files already exist under `dir` (certificates in `certs/`,
    /// configs `c<i>.toml`, data dirs `c<i>/`), as [`create`](Self::create) wrote them
    /// with `opts.base_port` set: `n` controllers, nothing started.
    pub fn reopen(dir: &Path, n: usize, opts: LocalOptions) -> Result<LocalCluster, LocalError> {
        let base = opts.base_port.ok_or(LocalError::NoBasePort)?;
        let mut ports = Ports::default();
        let controllers = (1..=n as u64)
            .map(|id| {
                let member = Self::new_member(&mut ports, id, Some(base))?;
                Ok::<_, LocalError>(LocalController {
                    config: dir.join(format!("{}.toml", member.name)),
                    data_dir: dir.join(&member.name),
                    log: dir.join(format!("{}.log", member.name)),
                    member,
                    child: None,
                    http_addr: None,
                })
            })
            .collect::<Result<_, _>>()?;
        Ok(LocalCluster {
            dir: dir.to_path_buf(),
            certs: dir.join("certs"),
            opts,
            controllers,
            agents: Vec::new(),
            ports,
        })
    }

    /// A controller's member record, its peer and client ports bound and held.
    fn new_member(
        ports: &mut Ports,
        id: u64,
        base_port: Option<u16>,
    ) -> Result<Member, LocalError> {
        let mut port = |k: u16| {
            let p = base_port.map_or(0, |b| b + 2 * id as u16 + k);
            ports.udp(SocketAddr::from(([127, 0, 0, 1], p)))
        };
        Ok(Member {
            id,
            name: format!("c{id}"),
            peer_addr: port(0)?.to_string(),
            client_addr: port(1)?.to_string(),
        })
    }

    /// Puts `text` (top-level settings) at the head of controller `i`'s config, before
    /// its tables; it takes effect at its next start.
    pub fn prepend_config(&mut self, i: usize, text: &str) -> Result<(), LocalError> {
        let path = &self.controllers[i].config;
        let old = std::fs::read_to_string(path).map_err(LocalError::io(path))?;
        std::fs::write(path, format!("{text}\n{old}")).map_err(LocalError::io(path))
    }

    /// A TCP port held for a process's config (e.g. `metrics_addr`): the process whose
    /// config names it as a top-level setting gets the listener when it starts.
    pub fn reserve_tcp(&mut self) -> Result<String, LocalError> {
        Ok(self
            .ports
            .tcp(SocketAddr::from(([127, 0, 0, 1], 0)))?
            .to_string())
    }

    /// A UDP port held for a process's config (e.g. `peer_listen`), as [`reserve_tcp`](Self::reserve_tcp).
    pub fn reserve_udp(&mut self) -> Result<String, LocalError> {
        Ok(self
            .ports
            .udp(SocketAddr::from(([127, 0, 0, 1], 0)))?
            .to_string())
    }

    /// Issues a certificate into the cluster's cert dir.
    pub fn issue(&self, role: Role, name: &str) -> Result<TlsFiles, LocalError> {
        Ok(tranche_tls::issue(
            &self.certs,
            &self.certs,
            role,
            name,
            &[],
            self.opts.cert_days,
        )?)
    }

    fn add_config(
        &mut self,
        m: Member,
        founders: &[Member],
        join: bool,
    ) -> Result<usize, LocalError> {
        let files = tranche_tls::issue(
            &self.certs,
            &self.certs,
            Role::Controller,
            &m.name,
            &["127.0.0.1".to_string()],
            self.opts.cert_days,
        )?;
        let data_dir = self.dir.join(&m.name);
        let mut text = format!(
            "id = {}\nname = \"{}\"\npeer_addr = \"{}\"\nclient_addr = \"{}\"\ndata_dir = \"{}\"\njoin = {}\nfault_injection = {}\n",
            m.id,
            m.name,
            m.peer_addr,
            m.client_addr,
            data_dir.display(),
            join,
            self.opts.fault_injection
        );
        let http_addr = match self.opts.http {
            true => Some(self.reserve_tcp()?),
            false => None,
        };
        if let Some(a) = &http_addr {
            text += &format!("http_addr = \"{a}\"\n");
        }
        // Extra settings go before the tables below, so that top-level keys in them
        // stay top-level.
        text += &self.opts.extra_config;
        text += "\n";
        for p in founders {
            text += &format!(
                "\n[[peers]]\nid = {}\nname = \"{}\"\npeer_addr = \"{}\"\nclient_addr = \"{}\"\n",
                p.id, p.name, p.peer_addr, p.client_addr
            );
        }
        text += &format!(
            "\n[tls]\nca = \"{}\"\ncert = \"{}\"\nkey = \"{}\"\n",
            files.ca.display(),
            files.cert.display(),
            files.key.display()
        );
        let config = self.dir.join(format!("{}.toml", m.name));
        std::fs::write(&config, text).map_err(LocalError::io(&config))?;
        self.controllers.push(LocalController {
            log: self.dir.join(format!("{}.log", m.name)),
            member: m,
            config,
            data_dir,
            child: None,
            http_addr,
        });
        Ok(self.controllers.len() - 1)
    }

    /// Writes the config of a new controller that joins the running cluster; returns
    /// its position. Start it, then add it with a membership change.
    pub fn prepare_joiner(&mut self, id: u64) -> Result<usize, LocalError> {
        let m = Self::new_member(&mut self.ports, id, self.opts.base_port)?;
        self.add_config(m, &[], true)
    }

    /// Starts controller `i` (a position in `controllers`).
    pub fn start(&mut self, i: usize) -> Result<(), LocalError> {
        let c = &mut self.controllers[i];
        if let Some(ch) = &mut c.child {
            if ch.try_wait().ok().flatten().is_none() {
                return Ok(());
            }
        }
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&c.log)
            .map_err(LocalError::io(&c.log))?;
        let config = std::fs::read_to_string(&c.config).map_err(LocalError::io(&c.config))?;
        let mut cmd = Command::new(&self.opts.tranched);
        cmd.arg("--config")
            .arg(&c.config)
            .env("TRANCHE_LOG", &self.opts.log_filter)
            .stdin(Stdio::null())
            .stdout(log.try_clone().map_err(LocalError::Os)?)
            .stderr(log);
        self.ports.hand(&mut cmd, &config)?;
        let child = cmd.spawn().map_err(|source| LocalError::Spawn {
            program: self.opts.tranched.clone(),
            source,
        })?;
        self.ports.handed(&config);
        c.child = Some(child);
        Ok(())
    }

    pub fn start_all(&mut self) -> Result<(), LocalError> {
        for i in 0..self.controllers.len() {
            self.start(i)?;
        }
        Ok(())
    }

    fn signal(&mut self, i: usize, sig: i32) {
        if let Some(ch) = &self.controllers[i].child {
            unsafe_kill(ch.id(), sig);
        }
    }

    /// SIGKILL, and wait for the process to be gone.
    pub fn kill(&mut self, i: usize) {
        self.signal(i, 9);
        if let Some(mut ch) = self.controllers[i].child.take() {
            let _ = ch.wait();
        }
    }

    /// SIGTERM, and wait (up to 10 s, then SIGKILL). Returns the exit status code.
    pub fn stop(&mut self, i: usize) -> Option<i32> {
        self.signal(i, 15);
        let mut ch = self.controllers[i].child.take()?;
        let exited = wait_for_blocking("exit after SIGTERM", Duration::from_secs(10), || match ch
            .try_wait()
        {
            Ok(Some(st)) => Ok(st.code()),
            other => Err(format!("{other:?}")),
        });
        match exited {
            Ok(code) => code,
            Err(_) => {
                let _ = ch.kill();
                let _ = ch.wait();
                None
            }
        }
    }

    pub fn is_running(&mut self, i: usize) -> bool {
        match &mut self.controllers[i].child {
            Some(ch) => ch.try_wait().ok().flatten().is_none(),
            None => false,
        }
    }

    /// The controllers' HTTPS API URLs (`https://127.0.0.1:PORT`), of those that serve one.
    pub fn http_urls(&self) -> Vec<String> {
        self.controllers
            .iter()
            .filter_map(|c| c.http_addr.as_ref().map(|a| format!("https://{a}")))
            .collect()
    }

    pub fn client_addrs(&self) -> Vec<SocketAddr> {
        self.controllers
            .iter()
            .map(|c| c.member.client_addr.parse().unwrap())
            .collect()
    }

    /// A client for a role and name (its certificate is issued on first use).
    pub fn client(&self, role: Role, name: &str) -> Result<Client, LocalError> {
        let files = TlsFiles::in_dir(&self.certs, role, name);
        if !files.cert.exists() {
            self.issue(role, name)?;
        }
        Ok(Client::new(self.client_addrs(), &files)?)
    }

    /// A client that talks only to controller `i`.
    pub fn client_of(&self, i: usize, role: Role, name: &str) -> Result<Client, LocalError> {
        let files = TlsFiles::in_dir(&self.certs, role, name);
        if !files.cert.exists() {
            self.issue(role, name)?;
        }
        let addr = self.controllers[i].member.client_addr.parse().unwrap();
        Ok(Client::new(vec![addr], &files)?)
    }

    /// Controller `i`'s own view (a stale read).
    pub async fn status_of(&self, admin: &Client, i: usize) -> Option<ClusterStatus> {
        let addr: SocketAddr = self.controllers[i].member.client_addr.parse().ok()?;
        let idx = admin.controllers().iter().position(|a| *a == addr)?;
        match admin
            .request_to(
                idx,
                &tranche_proto::ClientRequest::Read {
                    query: Query::Controllers,
                    stale: true,
                },
            )
            .await
        {
            Ok(Response::Controllers(s)) => Some(s),
            _ => None,
        }
    }

    /// Waits until some running controller reports itself leader; returns its position.
    pub async fn wait_leader(&mut self, admin: &Client, timeout: Duration) -> Option<usize> {
        wait_for("a leader", timeout, async || {
            for i in 0..self.controllers.len() {
                if !self.is_running(i) {
                    continue;
                }
                if let Some(s) = self.status_of(admin, i).await {
                    if s.leader == Some(s.id) {
                        return Ok(i);
                    }
                }
            }
            Err("no running controller reports itself leader".into())
        })
        .await
        .ok()
    }
}

/// The account a local cluster's jobs run as: the one running this process.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobAccount {
    pub name: String,
    /// It is root (the agents' configs then say `allow_root = true`).
    pub root: bool,
}

/// The account running this process, whose jobs a local cluster's agents run as
/// (`[users]` maps every name to it).
pub fn job_account() -> Result<JobAccount, LocalError> {
    let uid = nix::unistd::Uid::effective();
    match nix::unistd::User::from_uid(uid) {
        Ok(Some(u)) => Ok(JobAccount {
            name: u.name,
            root: uid.is_root(),
        }),
        Ok(None) => Err(LocalError::NoAccountName { uid: uid.as_raw() }),
        Err(source) => Err(LocalError::Account {
            uid: uid.as_raw(),
            source,
        }),
    }
}

impl LocalCluster {
    /// Writes an agent config for `node` with fake GPUs (`gpus`, e.g. "8 x h100") and
    /// `extra` top-level settings, and starts the agent binary `agent` with it. Unless
    /// `extra` has a `[users]` table (after its top-level settings), every job runs as
    /// the account running this process ([`job_account`]; root with `allow_root`).
    pub fn add_agent(
        &mut self,
        agent: &Path,
        node: &str,
        gpus: &str,
        extra: &str,
    ) -> Result<usize, LocalError> {
        let files = self.issue(Role::Agent, node)?;
        let spool = self
            .opts
            .spool_root
            .as_deref()
            .unwrap_or(&self.dir)
            .join(format!("spool-{node}"));
        let controllers: Vec<String> = self
            .client_addrs()
            .iter()
            .map(|a| format!("\"{a}\""))
            .collect();
        // Jobs run as their users' accounts; a local cluster's users (alice, dev, ...)
        // have none here, so unless told otherwise its jobs all run as whoever runs it.
        // `[tls]` stays the last table (tests append keys to it).
        let mut extra = extra.to_string();
        if !extra.contains("[users]") {
            let account = job_account()?;
            if account.root && !extra.contains("allow_root") {
                extra = format!("allow_root = true  # this local cluster runs as root\n{extra}");
            }
            extra.push_str(&format!(
                "\n# A local cluster: every user's jobs run as the account that started it.\n\
                 [users]\n\"*\" = \"{}\"\n",
                account.name
            ));
        }
        let text = format!(
            "node = \"{node}\"\ncontrollers = [{}]\nspool_dir = \"{}\"\ninventory = \"fake\"\nfake = \"{gpus}\"\naddress = \"127.0.0.1\"\n{extra}\n\n[tls]\nca = \"{}\"\ncert = \"{}\"\nkey = \"{}\"\n",
            controllers.join(", "),
            spool.display(),
            files.ca.display(),
            files.cert.display(),
            files.key.display()
        );
        // Several agents share this host: each takes a free log port unless told.
        let text = if extra.contains("logs_addr") {
            text
        } else {
            format!("logs_addr = \"127.0.0.1:0\"\n{text}")
        };
        let config = self.dir.join(format!("agent-{node}.toml"));
        std::fs::write(&config, text).map_err(LocalError::io(&config))?;
        self.agents.push(LocalAgent {
            node: node.to_string(),
            config,
            spool,
            log: self.dir.join(format!("agent-{node}.log")),
            child: None,
        });
        let i = self.agents.len() - 1;
        self.start_agent(agent, i)?;
        Ok(i)
    }

    pub fn start_agent(&mut self, agent: &Path, i: usize) -> Result<(), LocalError> {
        let a = &mut self.agents[i];
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&a.log)
            .map_err(LocalError::io(&a.log))?;
        let config = std::fs::read_to_string(&a.config).map_err(LocalError::io(&a.config))?;
        let mut cmd = Command::new(agent);
        cmd.arg("run")
            .arg("--config")
            .arg(&a.config)
            .env("TRANCHE_LOG", &self.opts.log_filter)
            .env("TRANCHE_AGENT_BIN", agent)
            .stdin(Stdio::null())
            .stdout(log.try_clone().map_err(LocalError::Os)?)
            .stderr(log);
        self.ports.hand(&mut cmd, &config)?;
        let child = cmd.spawn().map_err(|source| LocalError::Spawn {
            program: agent.to_path_buf(),
            source,
        })?;
        self.ports.handed(&config);
        a.child = Some(child);
        Ok(())
    }

    /// SIGKILL an agent (its jobs go on under their shims).
    pub fn kill_agent(&mut self, i: usize) {
        if let Some(mut ch) = self.agents[i].child.take() {
            let _ = ch.kill();
            let _ = ch.wait();
        }
    }
}

impl Drop for LocalCluster {
    fn drop(&mut self) {
        for a in &mut self.agents {
            if let Some(mut ch) = a.child.take() {
                let _ = ch.kill();
                let _ = ch.wait();
            }
        }
        for c in &mut self.controllers {
            if let Some(mut ch) = c.child.take() {
                let _ = ch.kill();
                let _ = ch.wait();
            }
        }
    }
}

fn unsafe_kill(pid: u32, sig: i32) {
    if let Ok(sig) = nix::sys::signal::Signal::try_from(sig) {
        let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid as i32), sig);
    }
}

/// Sends SIGINT to a process (as Ctrl-C does), for tests of interactive commands.
pub fn interrupt(pid: u32) {
    unsafe_kill(pid, 2);
}

/// Command lines of every process whose command line contains `needle` (from /proc).
pub fn processes_matching(needle: &str) -> Vec<String> {
    pids_matching(needle).into_iter().map(|(_, l)| l).collect()
}

/// Pid and command line of every process whose command line, its arguments joined by
/// spaces (each followed by one), contains `needle` (from /proc). A process that has
/// exited but is not reaped yet has no command line.
pub fn pids_matching(needle: &str) -> Vec<(i32, String)> {
    let mut out = Vec::new();
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return out;
    };
    for e in dir.flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        if let Ok(raw) = std::fs::read(e.path().join("cmdline")) {
            let line = String::from_utf8_lossy(&raw).replace('\0', " ");
            if line.contains(needle) {
                out.push((pid, line));
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_wait_that_runs_out_says_what_it_saw_last() {
        let after = Duration::from_millis(120);
        let mut n = 0;
        let e = wait_for("three", after, async || {
            n += 1;
            Err::<(), _>(format!("{n} of 3"))
        })
        .await
        .unwrap_err();
        match &e {
            LocalError::Timeout {
                what,
                after: a,
                last,
            } => {
                assert_eq!((what.as_str(), *a), ("three", after));
                assert!(last.ends_with(" of 3"), "{last}");
            }
            other => panic!("not a timeout: {other:?}"),
        }
        assert!(
            e.to_string()
                .starts_with("three: not within 120ms; last seen: "),
            "{e}"
        );
        let blocking = wait_for_blocking("never", after, || Err::<(), _>("no".into()));
        assert!(matches!(blocking, Err(LocalError::Timeout { .. })));
        // Callers that report failures as text get the same text.
        let text = wait_until_blocking("never", after, || Err::<(), _>("no".into()));
        assert_eq!(text.unwrap_err(), "never: not within 120ms; last seen: no");
    }

    #[test]
    fn reopening_needs_the_fixed_ports() {
        let dir = tempfile::tempdir().unwrap();
        let opts = LocalOptions::new(PathBuf::from("tranched"));
        assert!(matches!(
            LocalCluster::reopen(dir.path(), 3, opts),
            Err(LocalError::NoBasePort)
        ));
    }
}
