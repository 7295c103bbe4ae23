//! `tranched --config FILE`: the controller's TOML configuration.

use std::path::{Path, PathBuf};

use serde::Deserialize;

pub mod images;
use tranche_model::MAX_GPUS_PER_NODE_INVENTORY;
use tranche_proto::Member;

/// The whole file. Unknown keys are refused, so a typo is an error, not a default.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    /// This controller's Raft id (positive, unique, never reused).
    pub id: u64,
    /// This controller's name; its certificate should carry the same.
    pub name: String,
    /// The controller-to-controller address: where the other controllers reach this
    /// one (it is replicated in the membership), and where its port listens unless
    /// `peer_listen` says otherwise.
    pub peer_addr: String,
    /// Where the controller-to-controller port listens, when the others reach it at a
    /// different address (NAT, a relay); absent: `peer_addr`.
    #[serde(default)]
    pub peer_listen: Option<String>,
    /// Where the client port listens.
    pub client_addr: String,
    /// Holds `raft.redb`.
    pub data_dir: PathBuf,
    /// `ca`, `cert`, `key` and the optional `crl` (see [`tranche_tls::TlsFiles`]).
    pub tls: tranche_tls::TlsFiles,
    /// The founding members, this one included. Used only on the first start of an
    /// empty data dir; afterwards the replicated membership rules.
    #[serde(default)]
    pub peers: Vec<Member>,
    /// Start empty and wait to be added with `tranche controllers add`.
    #[serde(default)]
    pub join: bool,
    #[serde(default)]
    pub raft: RaftConfig,
    #[serde(default)]
    pub sched: SchedConfig,
    #[serde(default)]
    pub agents: AgentsConfig,
    #[serde(default)]
    pub accounting: AccountingConfig,
    /// `[retention]`: how long ended jobs stay in the replicated state, and how long
    /// this controller's history keeps them after.
    #[serde(default)]
    pub retention: RetentionConfig,
    /// The AWS Batch-compatible endpoint (served on `http_addr` under `/v1/`).
    #[serde(default)]
    pub aws: AwsConfig,
    /// Accept the `Isolate` test switch from admins. Never enable in production.
    #[serde(default)]
    pub fault_injection: bool,
    /// Where the HTTPS + JSON API listens (`/api/v1/`, with this controller's
    /// certificate); absent: not served.
    #[serde(default)]
    pub http_addr: Option<String>,
    /// Where Prometheus metrics are served (`GET /metrics`, no authentication);
    /// absent: not served. A bare port (`"9100"`) listens on 127.0.0.1 only; an
    /// address on another interface is served as given, with a warning at start.
    #[serde(default)]
    pub metrics_addr: Option<String>,
    /// `[limits]`: what one peer may cost the QUIC client port (streams, windows,
    /// request bytes, connections per identity, the frame deadline); see
    /// [`tranche_tls::QuicLimits`] for the defaults.
    #[serde(default)]
    pub limits: tranche_tls::QuicLimits,
    /// `[http]`: connection caps and timeouts of the HTTPS port.
    #[serde(default)]
    pub http: HttpLimits,
    /// Worker threads for network and client work (the Raft loop has its own).
    #[serde(default = "default_threads")]
    pub threads: usize,
}

fn default_threads() -> usize {
    std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(2)
        .clamp(1, 4)
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RaftConfig {
    /// One logical tick, in milliseconds.
    pub tick_ms: u64,
    /// A follower starts an election after this many ticks without a leader
    /// (randomized up to twice this).
    pub election_ticks: usize,
    /// The leader sends heartbeats every this many ticks.
    pub heartbeat_ticks: usize,
    /// Make a state-machine image (and compact the log) after this many applied entries.
    pub snapshot_entries: u64,
    /// Entries kept in the log behind the image, so a slightly lagging member catches up
    /// from the log rather than by snapshot.
    pub keep_entries: u64,
    /// A write not committed within this time is answered `Unavailable` (retry).
    pub proposal_timeout_ms: u64,
    /// Most entries in one append message.
    pub max_inflight_msgs: usize,
    /// Unsafe, for benchmarks only: never fsync the Raft log. Writes survive a crash of
    /// the process but not of the machine or its power, so acknowledged writes can be
    /// lost and a member can forget its vote. The controller warns at start.
    pub unsafe_no_fsync: bool,
}

impl Default for RaftConfig {
    fn default() -> Self {
        RaftConfig {
            tick_ms: 50,
            election_ticks: 10,
            heartbeat_ticks: 2,
            snapshot_entries: 100_000,
            keep_entries: 2_000,
            proposal_timeout_ms: 5_000,
            max_inflight_msgs: 256,
            unsafe_no_fsync: false,
        }
    }
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct SchedConfig {
    /// The leader starts a pass at least this long after the previous one started,
    /// unless the busy cap holds it back.
    pub interval_ms: u64,
    /// After commits that change demand or capacity, a pass starts once this long has
    /// passed since the previous one ended (and the busy cap allows).
    pub min_gap_ms: u64,
    /// The busy cap, for every reason to schedule (changes, `interval_ms`, a plan's
    /// wake-up): a pass starts no sooner than `100 / max_busy_percent` times the
    /// previous pass's duration after the previous pass started. So between the
    /// starts of consecutive passes the scheduler is busy at most this share of the
    /// time (at 10%, a 40 ms pass is followed by 360 ms without one).
    pub max_busy_percent: u8,
}

impl Default for SchedConfig {
    fn default() -> Self {
        SchedConfig {
            interval_ms: 1_000,
            min_gap_ms: 10,
            max_busy_percent: 10,
        }
    }
}

/// How the leader judges agents by their heartbeats.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct AgentsConfig {
    /// No heartbeat for this long: the node is UNREACHABLE (no new placements).
    pub unreachable_after_s: u64,
    /// No heartbeat for this long: the node is DOWN and its jobs are requeued. Must
    /// exceed the agents' `fence_after` plus the longest grace period, so that an agent
    /// cut off from the controllers has stopped its jobs before they run elsewhere.
    pub down_after_s: u64,
    /// `gpu01 = { pool = "prod" }`: a node's labels (what environments select), set
    /// here rather than by its agent. For a node named here they replace whatever its
    /// agent declares, but for the agent's own `tranche.` labels. The same on every
    /// controller.
    pub labels: std::collections::BTreeMap<String, std::collections::BTreeMap<String, String>>,
    /// Take a node's labels only from `labels` above: a node not named there gets none
    /// that an environment could select (only its agent's own `tranche.` labels),
    /// whatever its agent declares. For racks where a node's agent is not trusted to
    /// say which environments' jobs it runs. Default false.
    pub labels_from_config_only: bool,
}

impl Default for AgentsConfig {
    fn default() -> Self {
        AgentsConfig {
            unreachable_after_s: 10,
            down_after_s: 120,
            labels: Default::default(),
            labels_from_config_only: false,
        }
    }
}

/// `[aws]`: the AWS Batch-compatible endpoint. It serves when `key_secret_file` is set
/// (and `http_addr` is); requests are signed with access keys from `tranche keys issue`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct AwsConfig {
    /// The cluster's key secret: 32 or more random bytes, the same file on every
    /// controller, kept beside the certificates and outside the data dir. An access
    /// key's secret is derived from it and the key's id, so no secret is stored.
    pub key_secret_file: Option<PathBuf>,
    /// The region in ARNs, and one a request may be signed for.
    pub region: String,
    /// Further regions a request may be signed for.
    pub extra_regions: Vec<String>,
    /// The 12-digit account id in ARNs.
    pub account_id: String,
    /// `"ml.p5.48xlarge" = { unit = "h100", gpus = 8 }`: what an instance of each type
    /// is in GPUs of a capacity unit.
    pub instance_types: std::collections::BTreeMap<String, InstanceType>,
    /// `"<account>.dkr.ecr.<region>.amazonaws.com/name:tag" = "/images/name"`: the
    /// image a training image reference runs as (a rootfs directory or an OCI layout).
    /// A key may be a pattern (`763104351884.dkr.ecr.*.amazonaws.com/pytorch-training:*`,
    /// see [`images`]); an exact key wins over patterns.
    pub images: std::collections::BTreeMap<String, String>,
    /// `"fs-0123" = "/srv/datasets"`: the local directory a `FileSystemDataSource`'s
    /// file system id stands for (its `DirectoryPath` is read under it).
    pub file_systems: std::collections::BTreeMap<String, PathBuf>,
    /// Where the S3 endpoint keeps objects: `<s3_dir>/<user>/<bucket>/<key>`, one
    /// namespace of buckets per user. Unset (the default): the cluster serves no S3, and
    /// S3 channels are refused. Give every controller the same directory on a file
    /// system the nodes mount at the same path: the nodes read channels from it and
    /// write `model.tar.gz` into it.
    pub s3_dir: Option<PathBuf>,
}

/// What one instance of an AWS instance type is in Tranche's terms.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct InstanceType {
    pub unit: String,
    pub gpus: u32,
}

impl AwsConfig {
    /// The local image training image `reference` runs as (see [`images`]).
    pub fn image(&self, reference: &str) -> Option<&String> {
        images::lookup(&self.images, reference)
    }
}

impl Default for AwsConfig {
    fn default() -> Self {
        AwsConfig {
            key_secret_file: None,
            region: "us-west-2".into(),
            extra_regions: vec![],
            account_id: "123456789012".into(),
            instance_types: Default::default(),
            images: Default::default(),
            file_systems: Default::default(),
            s3_dir: None,
        }
    }
}

/// `[http]`: what clients of the HTTPS port (the API and the AWS endpoint) may hold.
///
/// ```toml
/// [http]
/// max_connections = 4096        # open connections, all clients together
/// connections_per_ip = 256      # open connections from one IP address
/// idle_timeout_s = 60           # a kept-alive connection idle this long is closed
/// body_timeout_s = 30           # a request's body (API or AWS) must arrive within this
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct HttpLimits {
    pub max_connections: u32,
    pub connections_per_ip: u32,
    pub idle_timeout_s: u64,
    pub body_timeout_s: u64,
}

impl Default for HttpLimits {
    fn default() -> Self {
        HttpLimits {
            max_connections: 4096,
            connections_per_ip: 256,
            idle_timeout_s: 60,
            body_timeout_s: 30,
        }
    }
}

/// How long the accounting ledger keeps its hours.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct AccountingConfig {
    /// Hours older than this many days are dropped (by the leader, for every
    /// controller alike).
    pub retention_days: u32,
}

impl Default for AccountingConfig {
    fn default() -> Self {
        AccountingConfig {
            retention_days: 400,
        }
    }
}

/// How long ended jobs stay in the replicated state (the *hot* state, in every
/// controller's memory, snapshots and state images) and in this controller's history
/// store (`history.redb` in its data dir) after they leave it.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RetentionConfig {
    /// An ended job leaves the hot state this many seconds after it ended (an array
    /// once its last task has ended).
    pub job_hot_s: u64,
    /// At most this many ended jobs stay in the hot state; beyond it the oldest leave
    /// before their `job_hot_s`.
    pub job_hot_max: u64,
    /// At most this many MiB of ended jobs stay in the hot state (their specs' text,
    /// an array's once, and about 512 bytes per job); beyond it the oldest leave
    /// before their `job_hot_s`. It bounds what a user who fills specs to their limit
    /// can make every controller hold.
    pub job_hot_max_mb: u64,
    /// The history store drops jobs that ended more than this many days ago.
    pub history_days: u32,
    /// How often the leader looks for ended jobs to drop, in seconds. Tests and the
    /// soak benchmark set it low; the default suits a cluster.
    pub check_s: u64,
}

impl Default for RetentionConfig {
    fn default() -> Self {
        RetentionConfig {
            job_hot_s: 24 * 3600,
            job_hot_max: 200_000,
            job_hot_max_mb: 1024,
            history_days: 400,
            check_s: 60,
        }
    }
}

pub use tranche_daemon_kit::ConfigError;

impl Config {
    pub fn load(path: &Path) -> Result<Config, ConfigError> {
        let text = tranche_daemon_kit::config::read(path)?;
        Config::parse(&text, &path.display().to_string())
    }

    pub fn parse(text: &str, path: &str) -> Result<Config, ConfigError> {
        let cfg: Config = tranche_daemon_kit::config::parse(text, path)?;
        cfg.validate(path)?;
        Ok(cfg)
    }

    fn validate(&self, path: &str) -> Result<(), ConfigError> {
        let bad = |field, rule: &str| ConfigError::Invalid {
            path: path.to_string(),
            field,
            rule: rule.to_string(),
        };
        if self.id == 0 {
            return Err(bad("id", "must be a positive integer"));
        }
        for (field, addr) in [
            ("peer_addr", &self.peer_addr),
            ("client_addr", &self.client_addr),
        ] {
            if addr.parse::<std::net::SocketAddr>().is_err() {
                return Err(bad(
                    field,
                    "must be an IP address and port, e.g. 127.0.0.1:7100",
                ));
            }
        }
        if let Some(a) = &self.peer_listen {
            if a.parse::<std::net::SocketAddr>().is_err() {
                return Err(bad(
                    "peer_listen",
                    "must be an IP address and port, e.g. 0.0.0.0:7100",
                ));
            }
        }
        if !self.join {
            if self.peers.is_empty() {
                return Err(bad(
                    "peers",
                    "must list the founding members (this one included) unless `join = true`",
                ));
            }
            if !self.peers.iter().any(|p| p.id == self.id) {
                return Err(bad("peers", "must include this controller's own id"));
            }
            let mut ids: Vec<u64> = self.peers.iter().map(|p| p.id).collect();
            ids.sort();
            ids.dedup();
            if ids.len() != self.peers.len() || ids.contains(&0) {
                return Err(bad("peers", "ids must be positive and distinct"));
            }
        }
        for p in &self.peers {
            for addr in [&p.peer_addr, &p.client_addr] {
                if addr.parse::<std::net::SocketAddr>().is_err() {
                    return Err(bad(
                        "peers",
                        "every peer_addr and client_addr must be an IP address and port",
                    ));
                }
            }
        }
        if let Some(a) = &self.metrics_addr {
            if let Err(rule) = tranche_tls::listen_addr(a) {
                return Err(bad("metrics_addr", &rule));
            }
        }
        self.limits
            .validate("limits")
            .map_err(|rule| bad("limits", &rule))?;
        let h = &self.http;
        for (name, v) in [
            ("http.max_connections", u64::from(h.max_connections)),
            ("http.connections_per_ip", u64::from(h.connections_per_ip)),
            ("http.idle_timeout_s", h.idle_timeout_s),
            ("http.body_timeout_s", h.body_timeout_s),
        ] {
            if v == 0 {
                return Err(bad("http", &format!("{name} must be at least 1, not 0")));
            }
        }
        if self.threads == 0 || self.threads > 256 {
            return Err(bad("threads", "must be 1 to 256"));
        }
        let r = &self.raft;
        if r.tick_ms == 0 || r.heartbeat_ticks == 0 || r.election_ticks <= r.heartbeat_ticks {
            return Err(bad("raft", "tick_ms and heartbeat_ticks must be positive and election_ticks greater than heartbeat_ticks"));
        }
        if r.snapshot_entries == 0 {
            return Err(bad("raft.snapshot_entries", "must be positive"));
        }
        let aws = &self.aws;
        if aws.account_id.len() != 12 || !aws.account_id.bytes().all(|b| b.is_ascii_digit()) {
            return Err(bad("aws.account_id", "must be 12 digits"));
        }
        let region_ok = |r: &str| {
            !r.is_empty()
                && r.len() <= 32
                && r.bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        };
        if !region_ok(&aws.region) || !aws.extra_regions.iter().all(|r| region_ok(r)) {
            return Err(bad(
                "aws.region",
                "regions are 1-32 lower-case letters, digits and `-`, e.g. us-west-2",
            ));
        }
        for (name, t) in &aws.instance_types {
            if t.gpus == 0 || t.gpus as usize > MAX_GPUS_PER_NODE_INVENTORY {
                return Err(bad(
                    "aws.instance_types",
                    &format!("`{name}`: gpus must be 1 to {MAX_GPUS_PER_NODE_INVENTORY}"),
                ));
            }
            if tranche_model::Unit::from(t.unit.as_str())
                .validate("unit")
                .is_err()
            {
                return Err(bad(
                    "aws.instance_types",
                    &format!("`{name}`: `{}` is not a valid capacity unit name", t.unit),
                ));
            }
        }
        if let Some(rule) = aws.images.keys().find_map(|k| images::pattern_error(k)) {
            return Err(bad("aws.images", &rule));
        }
        if self.retention.history_days == 0 {
            return Err(bad("retention.history_days", "must be at least 1"));
        }
        if self.retention.check_s == 0 {
            return Err(bad("retention.check_s", "must be at least 1"));
        }
        if self.accounting.retention_days == 0 {
            return Err(bad("accounting.retention_days", "must be at least 1"));
        }
        if self.sched.max_busy_percent == 0 || self.sched.max_busy_percent > 100 {
            return Err(bad("sched.max_busy_percent", "must be 1 to 100"));
        }
        if self.agents.unreachable_after_s == 0
            || self.agents.down_after_s <= self.agents.unreachable_after_s
        {
            return Err(bad(
                "agents",
                "unreachable_after_s must be positive and down_after_s greater than it",
            ));
        }
        if self.sched.interval_ms == 0 {
            return Err(bad("sched.interval_ms", "must be positive"));
        }
        Ok(())
    }

    /// Where the peer port listens.
    pub fn peer_listen(&self) -> &str {
        self.peer_listen.as_deref().unwrap_or(&self.peer_addr)
    }

    /// This controller as a member record.
    pub fn me(&self) -> Member {
        Member {
            id: self.id,
            name: self.name.clone(),
            peer_addr: self.peer_addr.clone(),
            client_addr: self.client_addr.clone(),
        }
    }
}
