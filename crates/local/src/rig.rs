//! The set-up shared by the tests that start real Tranche processes (`tranched`,
//! `tranche-agent`, `tranche`): a runtime, the one-cluster-at-a-time lock, a started
//! cluster, a revocation list, a leader, a policy applied, access keys, jobs read and
//! waited for, a CLI config, HTTPS connections, plain HTTP reads, the memory of a
//! process.
//!
//! Those tests live in the package of the binary they run, so that cargo builds it
//! for them; each passes its `env!("CARGO_BIN_EXE_...")` path here. The rig only sets
//! things up and reads them back: what a test asserts stays in the test. Every
//! function panics on failure, as a test's set-up should; `tranche dev` and the
//! benchmarks use [`LocalCluster`] directly and never this module.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use tranche_client::Client;
use tranche_model::{AccessKey, Job, JobId, KeyRole};
use tranche_proto::{ClientCommand, ClientRequest, Query, Response};
use tranche_tls::{revoke, RevokeTarget, Role, TlsFiles};

use crate::{LocalCluster, LocalOptions};

/// A multi-threaded tokio runtime with two workers, for a test's async part.
pub fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

/// One cluster test at a time in a test binary: each starts several processes, and a
/// machine with few cores runs them slower than their timeouts allow when they overlap.
static SERIAL: Mutex<()> = Mutex::new(());

/// Takes the one-cluster-at-a-time lock for as long as the guard lives; a test that
/// failed while holding it does not stop the others.
pub fn serial() -> MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

/// Options for a cluster of the `tranched` at `tranched`, with `extra` in every
/// controller's config (see [`LocalOptions::extra_config`]).
pub fn options(tranched: impl AsRef<Path>, extra: &str) -> LocalOptions {
    let mut opts = LocalOptions::new(tranched.as_ref().into());
    opts.extra_config = extra.to_string();
    opts
}

/// `n` controllers in `dir` with `opts`, started.
pub fn start(dir: &Path, n: usize, opts: LocalOptions) -> LocalCluster {
    let mut c = LocalCluster::create(dir, n, opts).unwrap();
    c.start_all().unwrap();
    c
}

/// `n` controllers of `tranched` in a new temporary dir, `extra` in their configs,
/// started; the dir lives as long as the returned handle.
pub fn cluster(
    tranched: impl AsRef<Path>,
    n: usize,
    extra: &str,
) -> (tempfile::TempDir, LocalCluster) {
    let dir = tempfile::tempdir().unwrap();
    let c = start(dir.path(), n, options(tranched, extra));
    (dir, c)
}

/// Puts a revocation list in every controller's config (a spare certificate revoked),
/// so that revoking later needs no restart. Call before the controllers start.
pub fn add_crl(c: &LocalCluster) {
    let spare = c.issue(Role::User, "spare").unwrap();
    let crl = revoke(&c.certs, &RevokeTarget::Cert(spare.cert.clone()))
        .unwrap()
        .crl;
    for ctl in &c.controllers {
        let mut text = std::fs::read_to_string(&ctl.config).unwrap();
        // The config ends with its `[tls]` table, where `crl` belongs.
        assert!(
            text.ends_with(&format!(
                "key = \"{}\"\n",
                TlsFiles::in_dir(&c.certs, Role::Controller, &ctl.member.name)
                    .key
                    .display()
            )),
            "{} does not end with its [tls] table",
            ctl.config.display()
        );
        text += &format!("crl = \"{}\"\n", crl.display());
        std::fs::write(&ctl.config, text).unwrap();
    }
}

/// An admin client once a leader is elected within `timeout`, and the leader's
/// position.
pub async fn leader(c: &mut LocalCluster, timeout: Duration) -> (Client, usize) {
    let admin = c.client(Role::Admin, "admin").unwrap();
    let leader = c.wait_leader(&admin, timeout).await.expect("a leader");
    (admin, leader)
}

/// A config file for the `tranche` CLI in `dir`, naming `c`'s controllers and the
/// certificate of `role` and `name` (issued first when `c` has none yet); its path.
pub fn cli_config(c: &LocalCluster, dir: &Path, role: Role, name: &str) -> PathBuf {
    let files = TlsFiles::in_dir(&c.certs, role, name);
    if !files.cert.exists() {
        c.issue(role, name).unwrap();
    }
    let controllers: Vec<String> = c
        .client_addrs()
        .iter()
        .map(|a| format!("\"{a}\""))
        .collect();
    let cfg = dir.join(format!("{role}-{name}.toml"));
    std::fs::write(
        &cfg,
        format!(
            "controllers = [{}]\n[tls]\nca = \"{}\"\ncert = \"{}\"\nkey = \"{}\"\n",
            controllers.join(", "),
            files.ca.display(),
            files.cert.display(),
            files.key.display()
        ),
    )
    .unwrap();
    cfg
}

/// Writes each command as `admin`; each must be accepted.
pub async fn apply(admin: &Client, cmds: impl IntoIterator<Item = ClientCommand>) {
    for cmd in cmds {
        let r = admin.command(cmd).await.expect("write answered");
        assert!(r.is_ok(), "refused: {r:?}");
    }
}

/// An access key for the AWS endpoint, of `user` with `role`, issued through
/// `client` (the user itself, or an admin); the key and its secret.
pub async fn access_key(client: &Client, user: &str, role: KeyRole) -> (AccessKey, String) {
    let req = ClientRequest::Write {
        request: None,
        command: ClientCommand::IssueAccessKey {
            user: user.into(),
            role,
        },
    };
    match client.request(&req).await {
        Ok(Response::AccessKey { key, secret }) => (key, secret),
        other => panic!("no key issued: {other:?}"),
    }
}

/// Job `id` as `client` reads it.
pub async fn job(client: &Client, id: JobId) -> Job {
    match client.read(Query::Job(id.into()), false).await {
        Ok(Response::Job(j)) => *j,
        other => panic!("job {id}: {other:?}"),
    }
}

/// Reads job `id` until `done` holds for it, for at most `timeout`; panics naming
/// `what` and the job's last status and attempts. The job as it was then.
pub async fn wait_for(
    admin: &Client,
    id: JobId,
    what: &str,
    timeout: Duration,
    done: impl Fn(&Job) -> bool,
) -> Job {
    let deadline = Instant::now() + timeout;
    loop {
        let j = job(admin, id).await;
        if done(&j) {
            return j;
        }
        assert!(
            Instant::now() < deadline,
            "job {id}: {what} never happened: {:?} {:?}",
            j.status,
            j.attempts
        );
        tokio::time::sleep(crate::POLL_INTERVAL).await;
    }
}

/// The client TLS configuration of a test's HTTPS requests: the cluster CA at `ca` as
/// the only root, the certificate `cert` when given (else none), ALPN `http/1.1`.
pub fn https_client_config(ca: &Path, cert: Option<&TlsFiles>) -> rustls::ClientConfig {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut roots = rustls::RootCertStore::empty();
    for c in tranche_tls::load_certs(ca).unwrap() {
        roots.add(c).unwrap();
    }
    let b = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots);
    let mut cfg = match cert {
        Some(f) => b
            .with_client_auth_cert(
                tranche_tls::load_certs(&f.cert).unwrap(),
                tranche_tls::load_key(&f.key).unwrap(),
            )
            .unwrap(),
        None => b.with_no_client_auth(),
    };
    cfg.alpn_protocols = vec![tranche_tls::HTTP_ALPN.to_vec()];
    cfg
}

/// A TLS connection to a controller's HTTPS port at `addr` with `cfg`, the
/// controllers' server name checked.
pub async fn https_connect(
    addr: &str,
    cfg: Arc<rustls::ClientConfig>,
) -> std::io::Result<tokio_rustls::client::TlsStream<tokio::net::TcpStream>> {
    let tcp = tokio::net::TcpStream::connect(addr).await?;
    let name = rustls_pki_types::ServerName::try_from(tranche_tls::CONTROLLER_SERVER_NAME)
        .expect("a valid server name");
    tokio_rustls::TlsConnector::from(cfg)
        .connect(name, tcp)
        .await
}

/// The whole answer (status line, headers, body) to a plain HTTP/1.0 GET of `path`
/// on 127.0.0.1:`port`, such as a metrics port; a read stalled for 10 s fails.
pub fn http_get(port: u16, path: &str) -> String {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    write!(s, "GET {path} HTTP/1.0\r\nHost: x\r\n\r\n").unwrap();
    let mut text = String::new();
    s.read_to_string(&mut text).unwrap();
    text
}

/// The resident memory (VmRSS) of process `pid` in MiB; `None` when it cannot be read
/// (the process is gone).
pub fn rss_mib(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let kb = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))?
        .split_whitespace()
        .next()?
        .parse::<u64>()
        .ok()?;
    Some(kb / 1024)
}

/// Seconds since the Unix epoch.
pub fn now_s() -> u64 {
    now_ms() / 1000
}

/// Milliseconds since the Unix epoch.
pub fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64
}

/// The binary `name` of package `package`, from the target dir of `beside` (another
/// binary of the same build); built first when missing, as when one package's tests
/// run alone.
pub fn sibling_bin(beside: &Path, name: &str, package: &str) -> PathBuf {
    let p = beside.parent().unwrap().join(name);
    if !p.exists() {
        let cargo = option_env!("CARGO").unwrap_or("cargo");
        let st = Command::new(cargo)
            .args(["build", "-p", package, "--bin", name])
            .status()
            .unwrap_or_else(|e| panic!("cargo build {name}: {e}"));
        assert!(st.success(), "building {name} failed");
    }
    p
}

/// Debian's libfaketime (package `libfaketime`, pulled in by `faketime`; its
/// multi-threaded build), if installed.
pub fn find_faketime() -> Option<PathBuf> {
    [
        "/usr/lib/x86_64-linux-gnu",
        "/usr/lib/aarch64-linux-gnu",
        "/usr/lib",
    ]
    .iter()
    .map(|d| Path::new(d).join("faketime/libfaketimeMT.so.1"))
    .find(|p| p.exists())
}
