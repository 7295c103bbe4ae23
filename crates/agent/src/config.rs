//! `tranche-agent --config FILE`: the agent's TOML configuration.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use serde::Deserialize;
use tranche_model::GpuIndex;

use crate::exec::CgroupMode;

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AgentConfig {
    /// This node's name; its agent certificate must carry the same.
    pub node: String,
    /// The controllers' client addresses.
    pub controllers: Vec<String>,
    /// Attempt directories (spec, output, exit status) and unpacked images.
    pub spool_dir: PathBuf,
    /// Where attempts' directories are kept while they run (default
    /// `<spool_dir>/attempts`). Their records (spec, launch record, pids, exit status)
    /// have to outlive the agent's and the shims' processes, not the node, so a tmpfs
    /// such as `/run/tranche-agent` spares the disk the dozen file creations and
    /// removals of every attempt. A job's output kept by the agent (no `--output`) and
    /// a SageMaker job's `/opt/ml` are then in memory while the attempt runs, and
    /// copied to `<spool_dir>` when it ends. Not to be shared with another agent.
    #[serde(default)]
    pub attempts_dir: Option<PathBuf>,
    /// `nvml` (the default: the real GPUs) or `fake`.
    #[serde(default = "default_inventory")]
    pub inventory: String,
    /// With `inventory = "fake"`: the GPUs, e.g. "8 x h100".
    #[serde(default)]
    pub fake: Option<String>,
    /// With `inventory = "fake"`: GPUs (by index) reported unhealthy, to try the drain
    /// that an unhealthy GPU causes.
    #[serde(default)]
    pub fake_unhealthy: Vec<GpuIndex>,
    /// Node labels (environments select nodes by them). `tranche.unit` sets the unit of
    /// every GPU of the node.
    #[serde(default)]
    pub labels: BTreeMap<String, String>,
    /// CPUs and memory offered to jobs (default: what the machine has).
    #[serde(default)]
    pub cpus: Option<u32>,
    #[serde(default)]
    pub memory_mb: Option<u64>,
    /// The address jobs of other nodes reach this one at: a gang's `MASTER_ADDR` when
    /// this node is its rank 0 (default: this machine's address on the route to the
    /// first controller, see [`AgentConfig::advertised_address`]).
    #[serde(default)]
    pub address: Option<String>,
    /// The range `MASTER_PORT` is drawn from when this node is a gang's rank 0, `LO-HI`
    /// inclusive (default `20000-29999`). Keep it clear of the node's other services
    /// and of the ephemeral port range.
    #[serde(default = "default_rendezvous_ports")]
    pub rendezvous_ports: String,
    /// Where the agent serves its jobs' output (`tranche logs`); port 0 picks a free one.
    #[serde(default = "default_logs_addr")]
    pub logs_addr: String,
    /// Where Prometheus metrics are served (`GET /metrics`); absent: not served.
    #[serde(default)]
    pub metrics_addr: Option<String>,
    #[serde(default = "default_heartbeat_ms")]
    pub heartbeat_ms: u64,
    /// Without a controller quorum for this long, the agent stops its jobs itself, so a
    /// later DOWN and requeue can never double-book a GPU: each job gets its checkpoint
    /// signal and, after a fixed grace of [`crate::daemon::ORPHAN_GRACE`] (10 s, not the
    /// job's own grace, which the agent learns only with a stop order), SIGKILL; a stop
    /// already under way keeps its own grace. The controllers' `down_after_s` must exceed
    /// `fence_after_s` plus those 10 s, and the longest grace of such a stop. The agent's
    /// [lease](crate::exec::lease) runs out `fence_after_s` after its last contact, and
    /// each shim then stops its job the same way, so a frozen or dead agent fences too.
    #[serde(default = "default_fence_after_s")]
    pub fence_after_s: u64,
    /// The cgroup hierarchy that tracks process jobs: `auto` (the default: v1 `pids`,
    /// else v1 `freezer`, else v2), `v1` or `v2` (see [`CgroupMode`]).
    #[serde(default = "default_cgroup")]
    pub cgroup: String,
    /// `ca`, `cert`, `key` and the optional `crl` (see [`tranche_tls::TlsFiles`]).
    pub tls: tranche_tls::TlsFiles,
    /// GPU product name → capacity unit, e.g. `"NVIDIA H100 80GB HBM3" = "h100"`.
    #[serde(default)]
    pub units: BTreeMap<String, String>,
    /// Jobs whose account is root (uid 0) run only when this is true; refused otherwise.
    #[serde(default)]
    pub allow_root: bool,
    /// Certificate name → the node's account for it, where they differ (`alice =
    /// "asmith"`); a name not listed is its own account. The key `"*"` maps every name
    /// not listed (a test or single-user cluster whose jobs all run as one account).
    #[serde(default)]
    pub users: BTreeMap<String, String>,
    /// The lowest uid a job may run as (root aside, see `allow_root`): system accounts
    /// below it (daemons, `www-data`, ...) are refused. Default 1000.
    #[serde(default = "default_min_uid")]
    pub min_uid: u32,
    /// Groups whose members jobs may not run as: membership in any of them is root, or
    /// near it, on the node (default `root`, `sudo`, `wheel`, `adm`, `disk`, `docker`,
    /// `lxd`, `shadow`). A group the node does not have is skipped.
    #[serde(default = "default_deny_groups")]
    pub deny_groups: Vec<String>,
    /// Shares whose process jobs may gain privileges through setuid/setgid programs
    /// (`sudo`, ...). Every other process job runs with `PR_SET_NO_NEW_PRIVS`, as every
    /// container does. Default: none.
    #[serde(default)]
    pub allow_setuid_shares: Vec<String>,
    /// Memory limit of a job that asks for none, in MiB per GPU it has (a job without
    /// GPUs gets one GPU's worth). Default: the memory offered to jobs divided by the
    /// node's GPUs. 0: no limit.
    #[serde(default)]
    pub default_memory_mb_per_gpu: Option<u64>,
    /// CPU limit of a job that asks for none, in whole CPUs per GPU it has (as memory).
    /// Default: the CPUs offered to jobs divided by the node's GPUs (at least 1). 0: no
    /// limit.
    #[serde(default)]
    pub default_cpus_per_gpu: Option<u32>,
    /// `pids.max` of every job, per GPU it has (a job without GPUs gets one GPU's
    /// worth). Default 4096; 1 to 4194304.
    #[serde(default = "default_pids_max_per_gpu")]
    pub pids_max_per_gpu: u64,
    /// Where the GPUs' device nodes are (`nvidia<N>`, `nvidiactl`, `nvidia-uvm`):
    /// default `/dev`.
    #[serde(default = "default_device_dir")]
    pub device_dir: PathBuf,
    /// Device nodes, or directories of them, that every process job may open besides
    /// the standard ones (`/dev/null`, ttys, ...) and its own GPUs; every other device
    /// is denied to it where the node has the cgroup v1 `devices` controller. Default
    /// `["/dev/infiniband"]` (RDMA for NCCL and MPI).
    #[serde(default = "default_job_devices")]
    pub job_devices: Vec<PathBuf>,
    /// Where a process job gets a directory of its own on the node, owned by its user
    /// (a SageMaker job's `/opt/ml`): `<work_dir>/<job>.<attempt>`. Default
    /// `<spool_dir>.work`, beside the spool, which only root enters.
    #[serde(default)]
    pub work_dir: Option<PathBuf>,
    /// Where container images may be used as they are, and how large they may be.
    #[serde(default)]
    pub images: ImagesConfig,
    /// How many days the agent keeps an ended attempt's output in the spool
    /// (`<spool>/logs`: stdout, stderr, and the record of its `--output`/`--error`
    /// files), counted from the output's last write; `tranche logs` of an older attempt
    /// says it is no longer kept. Files a job wrote outside the spool are its user's and
    /// never removed. Default 30; 0 keeps output forever.
    #[serde(default = "default_output_keep_days")]
    pub output_keep_days: u32,
}

fn default_output_keep_days() -> u32 {
    30
}

/// The `[images]` table: the image cache's trusted roots and limits (see
/// [`crate::exec::ImagePolicy`]).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ImagesConfig {
    /// Absolute directories whose rootfs directories jobs use as they are; a rootfs
    /// directory anywhere else is copied into the image cache for each new content.
    #[serde(default)]
    pub roots: Vec<PathBuf>,
    /// Largest blob of an image (a layer as stored), MiB.
    #[serde(default = "default_max_blob_mb")]
    pub max_blob_mb: u64,
    /// Largest image (its blobs as stored, or a copied rootfs directory), MiB.
    #[serde(default = "default_max_image_mb")]
    pub max_image_mb: u64,
    /// Largest unpacked image, MiB.
    #[serde(default = "default_max_unpacked_mb")]
    pub max_unpacked_mb: u64,
    /// Most files, directories and links of an unpacked image.
    #[serde(default = "default_max_entries")]
    pub max_entries: u64,
}

impl Default for ImagesConfig {
    fn default() -> ImagesConfig {
        ImagesConfig {
            roots: Vec::new(),
            max_blob_mb: default_max_blob_mb(),
            max_image_mb: default_max_image_mb(),
            max_unpacked_mb: default_max_unpacked_mb(),
            max_entries: default_max_entries(),
        }
    }
}

fn default_max_blob_mb() -> u64 {
    crate::exec::image_defaults::MAX_BLOB_MB
}
fn default_max_image_mb() -> u64 {
    crate::exec::image_defaults::MAX_IMAGE_MB
}
fn default_max_unpacked_mb() -> u64 {
    crate::exec::image_defaults::MAX_UNPACKED_MB
}
fn default_max_entries() -> u64 {
    crate::exec::image_defaults::MAX_ENTRIES
}

fn default_inventory() -> String {
    "nvml".into()
}
fn default_logs_addr() -> String {
    "0.0.0.0:7102".into()
}
fn default_heartbeat_ms() -> u64 {
    2_000
}
fn default_fence_after_s() -> u64 {
    30
}
fn default_rendezvous_ports() -> String {
    let (lo, hi) = tranche_proto::DEFAULT_RENDEZVOUS_PORTS;
    format!("{lo}-{hi}")
}
fn default_cgroup() -> String {
    "auto".into()
}
fn default_min_uid() -> u32 {
    1000
}
fn default_deny_groups() -> Vec<String> {
    [
        "root", "sudo", "wheel", "adm", "disk", "docker", "lxd", "shadow",
    ]
    .map(String::from)
    .to_vec()
}
fn default_pids_max_per_gpu() -> u64 {
    crate::exec::policy::DEFAULT_PIDS_MAX_PER_GPU
}
fn default_device_dir() -> PathBuf {
    PathBuf::from("/dev")
}
fn default_job_devices() -> Vec<PathBuf> {
    vec![PathBuf::from("/dev/infiniband")]
}

pub use tranche_daemon_kit::ConfigError;

/// An account name as NSS takes it: not empty, at most 256 bytes, no `-` first (it
/// would read as an option to tools), no `:` or `/` (they delimit the account
/// database's fields and paths), no whitespace or control characters.
fn check_account_name(a: &str) -> Result<(), &'static str> {
    if a.is_empty() {
        return Err("must not be empty");
    }
    if a.len() > 256 {
        return Err("must be at most 256 bytes");
    }
    if a.starts_with('-') {
        return Err("must not begin with '-'");
    }
    if a.chars()
        .any(|c| c == ':' || c == '/' || c.is_whitespace() || c.is_control())
    {
        return Err("must not contain ':', '/', whitespace or control characters");
    }
    Ok(())
}

impl AgentConfig {
    pub fn load(path: &Path) -> Result<AgentConfig, ConfigError> {
        let text = tranche_daemon_kit::config::read(path)?;
        AgentConfig::parse(&text, &path.display().to_string())
    }

    pub fn parse(text: &str, path: &str) -> Result<AgentConfig, ConfigError> {
        let cfg: AgentConfig = tranche_daemon_kit::config::parse(text, path)?;
        let bad = |field, rule: &str| ConfigError::Invalid {
            path: path.to_string(),
            field,
            rule: rule.to_string(),
        };
        if tranche_model::NodeName::from(cfg.node.as_str())
            .validate("node")
            .is_err()
        {
            return Err(bad(
                "node",
                "must be a node name: lowercase letters, digits, '-', '_' and '.'",
            ));
        }
        if cfg.controllers.is_empty()
            || cfg
                .controllers
                .iter()
                .any(|a| a.parse::<SocketAddr>().is_err())
        {
            return Err(bad(
                "controllers",
                "must list the controllers' client addresses, e.g. \"10.0.0.11:7100\"",
            ));
        }
        match (cfg.inventory.as_str(), &cfg.fake) {
            ("nvml", None) | ("fake", Some(_)) => {}
            ("nvml", Some(_)) => return Err(bad("fake", "is only for `inventory = \"fake\"`")),
            ("fake", None) => return Err(bad("fake", "must declare the GPUs, e.g. \"8 x h100\"")),
            _ => return Err(bad("inventory", "must be \"nvml\" or \"fake\"")),
        }
        if cfg.logs_addr.parse::<SocketAddr>().is_err() {
            return Err(bad(
                "logs_addr",
                "must be an IP address and port, e.g. \"0.0.0.0:7102\"",
            ));
        }
        if let Some(Err(rule)) = cfg.metrics_addr.as_deref().map(tranche_tls::listen_addr) {
            return Err(bad("metrics_addr", &rule));
        }
        if cfg
            .address
            .as_ref()
            .is_some_and(|a| a.is_empty() || a.contains(|c: char| c.is_whitespace() || c == ','))
        {
            return Err(bad(
                "address",
                "must be a host name or IP address, e.g. \"10.0.0.21\"",
            ));
        }
        if tranche_proto::parse_port_range(&cfg.rendezvous_ports).is_none() {
            return Err(bad(
                "rendezvous_ports",
                "must be a port range LO-HI with 0 < LO <= HI <= 65535, e.g. \"20000-29999\"",
            ));
        }
        if let Some(d) = &cfg.attempts_dir {
            if !d.is_absolute() {
                return Err(bad(
                    "attempts_dir",
                    "must be an absolute path, e.g. \"/run/tranche-agent\"",
                ));
            }
            if d.starts_with(&cfg.spool_dir) && d != &cfg.spool_dir.join("attempts") {
                return Err(bad(
                    "attempts_dir",
                    "must be outside `spool_dir` (or its `attempts` directory, the default)",
                ));
            }
        }
        if cfg.heartbeat_ms == 0 || cfg.heartbeat_ms > 60_000 {
            return Err(bad("heartbeat_ms", "must be 1 to 60000"));
        }
        if cfg.fence_after_s * 1000 <= cfg.heartbeat_ms * 2 {
            return Err(bad("fence_after_s", "must be longer than two heartbeats"));
        }
        if let Err(e) = cfg.cgroup.parse::<CgroupMode>() {
            return Err(bad("cgroup", &e.to_string()));
        }
        if !(1..=4_194_304).contains(&cfg.pids_max_per_gpu) {
            return Err(bad(
                "pids_max_per_gpu",
                &format!("is {}; must be 1 to 4194304", cfg.pids_max_per_gpu),
            ));
        }
        if let Some(d) = &cfg.work_dir {
            if !d.is_absolute() || d.starts_with(&cfg.spool_dir) {
                return Err(bad(
                    "work_dir",
                    "must be an absolute path outside `spool_dir` (its users enter it), \
                     e.g. \"/var/spool/tranche.work\"",
                ));
            }
        }
        for (field, p) in std::iter::once(("device_dir", &cfg.device_dir))
            .chain(cfg.job_devices.iter().map(|p| ("job_devices", p)))
        {
            if !p.is_absolute() {
                return Err(bad(
                    field,
                    &format!("`{}` must be an absolute path", p.display()),
                ));
            }
        }
        for g in &cfg.deny_groups {
            if let Err(rule) = check_account_name(g) {
                return Err(bad(
                    "deny_groups",
                    &format!("\"{g}\": the group name {rule}"),
                ));
            }
        }
        if cfg.images.roots.iter().any(|r| !r.is_absolute()) {
            return Err(bad(
                "images.roots",
                "must list absolute directories, e.g. [\"/srv/rootfs\"]",
            ));
        }
        for (field, v) in [
            ("images.max_blob_mb", cfg.images.max_blob_mb),
            ("images.max_image_mb", cfg.images.max_image_mb),
            ("images.max_unpacked_mb", cfg.images.max_unpacked_mb),
        ] {
            if v == 0 || v > 1 << 30 {
                return Err(bad(
                    field,
                    &format!("must be 1 to {} (MiB), not {v}", 1u64 << 30),
                ));
            }
        }
        if cfg.images.max_entries == 0 {
            return Err(bad("images.max_entries", "must be at least 1, not 0"));
        }
        if cfg.images.max_blob_mb > cfg.images.max_image_mb {
            return Err(bad(
                "images.max_blob_mb",
                &format!(
                    "must be at most images.max_image_mb ({}), not {}",
                    cfg.images.max_image_mb, cfg.images.max_blob_mb
                ),
            ));
        }
        for (name, account) in &cfg.users {
            if name != "*" {
                if let Err(e) = tranche_model::UserName::from(name.as_str()).validate("users") {
                    return Err(bad(
                        "users",
                        &format!("key \"{name}\" is not a certificate user name: {}", e.rule),
                    ));
                }
            }
            if let Err(rule) = check_account_name(account) {
                return Err(bad(
                    "users",
                    &format!("\"{name}\" = \"{account}\": the account {rule}"),
                ));
            }
            if account == "root" && !cfg.allow_root {
                return Err(bad(
                    "users",
                    &format!(
                        "\"{name}\" = \"root\" runs jobs as root, which needs `allow_root = true`"
                    ),
                ));
            }
        }
        if let Some(account) = cfg.users.get("*") {
            tracing::warn!(
                "{path}: [users] \"*\" = \"{account}\" runs the job of every user not listed \
                 as the one account {account}: tenants can read and change each other's jobs \
                 and files on this node. Use it only for a test or single-user cluster"
            );
        }
        Ok(cfg)
    }

    /// The rules for the jobs of a node offering `cpus` and `memory_mb` to jobs, with
    /// `gpus` GPUs.
    pub fn job_policy(&self, cpus: u32, memory_mb: u64, gpus: usize) -> crate::exec::JobPolicy {
        let gpus = gpus.max(1);
        crate::exec::JobPolicy {
            allow_setuid_shares: self.allow_setuid_shares.clone(),
            default_memory_mb_per_gpu: self
                .default_memory_mb_per_gpu
                .unwrap_or(memory_mb / gpus as u64),
            default_cpus_per_gpu: self
                .default_cpus_per_gpu
                .unwrap_or((cpus / gpus as u32).max(1)),
            pids_max_per_gpu: self.pids_max_per_gpu,
            device_dir: self.device_dir.clone(),
            job_devices: self.job_devices.clone(),
            work_dir: self.work_dir.clone(),
        }
    }

    /// The image cache's policy from `[images]` (validated by [`AgentConfig::parse`]).
    pub fn image_policy(&self) -> crate::exec::ImagePolicy {
        let i = &self.images;
        crate::exec::ImagePolicy {
            roots: i.roots.clone(),
            max_blob_bytes: i.max_blob_mb << 20,
            max_image_bytes: i.max_image_mb << 20,
            max_unpacked_bytes: i.max_unpacked_mb << 20,
            max_entries: i.max_entries,
        }
    }

    /// The `cgroup` setting (validated by [`AgentConfig::parse`]).
    pub fn cgroup_mode(&self) -> CgroupMode {
        self.cgroup.parse().unwrap_or_default()
    }

    /// The address other nodes' jobs reach this node at: `address` when set, else the
    /// local address of this machine's route to the first controller (the address it
    /// reaches the controllers from; found without sending anything), else the node
    /// name.
    pub fn advertised_address(&self) -> String {
        if let Some(a) = &self.address {
            return a.clone();
        }
        let route = |to: SocketAddr| {
            let any: SocketAddr = if to.is_ipv4() {
                "0.0.0.0:0".parse().ok()?
            } else {
                "[::]:0".parse().ok()?
            };
            let sock = std::net::UdpSocket::bind(any).ok()?;
            sock.connect(to).ok()?;
            sock.local_addr().ok().map(|a| a.ip())
        };
        self.controller_addrs()
            .first()
            .and_then(|&to| route(to))
            .filter(|ip| !ip.is_unspecified())
            .map(|ip| ip.to_string())
            .unwrap_or_else(|| self.node.clone())
    }

    /// The `rendezvous_ports` range (validated by [`AgentConfig::parse`]).
    pub fn rendezvous_range(&self) -> (u16, u16) {
        tranche_proto::parse_port_range(&self.rendezvous_ports)
            .unwrap_or(tranche_proto::DEFAULT_RENDEZVOUS_PORTS)
    }

    pub fn controller_addrs(&self) -> Vec<SocketAddr> {
        self.controllers
            .iter()
            .filter_map(|a| a.parse().ok())
            .collect()
    }
}
