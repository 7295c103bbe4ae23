//! `tranche dev`: a whole local cluster on loopback: 3 controllers, 4 agents with fake
//! GPUs in 2 units, certificates, and a demo policy with a RESERVE, a LEND and a
//! LEND_AND_BORROW share. It prints the line that points the CLI at it; Ctrl-C stops
//! everything (jobs included) and leaves nothing running.
//!
//! The controllers and agents are the `tranched` and `tranche-agent` binaries beside
//! this one (`cargo build` builds all three), or `$TRANCHED` and `$TRANCHE_AGENT`.
//!
//! Its agents run every job as the account that runs `tranche dev` (root included,
//! then with `allow_root`), whoever submits it: see [`tranche_local::job_account`].

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use tranche_local::{demo, LocalCluster, LocalOptions};
use tranche_tls::Role;

/// The instance types `tranche dev` maps its demo units to (its nodes have 4 GPUs).
const DEV_INSTANCE_TYPES: [(&str, &str, u32); 3] = [
    ("ml.g5.xlarge", "a100", 1),
    ("ml.g5.12xlarge", "a100", 4),
    ("ml.p5.4xlarge", "h100", 1),
];

/// The training image reference `tranche dev`'s image catalog knows.
pub const DEV_TRAINING_IMAGE: &str =
    "123456789012.dkr.ecr.us-west-2.amazonaws.com/tranche-train:latest";

/// AWS's PyTorch training images, of every region and tag, as AWS's sample notebooks
/// name them: `tranche dev`'s catalog runs them as its demo image.
pub const DEV_PYTORCH_IMAGES: &str = "763104351884.dkr.ecr.*.amazonaws.com/pytorch-training:*";

/// The controllers' `[aws]` table: the key secret, the demo units as instance types,
/// the catalog (the demo image, an OCI layout or rootfs put at
/// `<dir>/images/tranche-train`, as [`DEV_TRAINING_IMAGE`] and as every
/// [`DEV_PYTORCH_IMAGES`]) and one file system (`fs-dev`: `<dir>/data`).
fn aws_config(dir: &std::path::Path, key_secret: &std::path::Path) -> String {
    let mut t = format!(
        "[aws]\nkey_secret_file = \"{}\"\ns3_dir = \"{}\"\n\n[aws.instance_types]\n",
        key_secret.display(),
        dir.join("s3").display()
    );
    for (name, unit, gpus) in DEV_INSTANCE_TYPES {
        t += &format!("\"{name}\" = {{ unit = \"{unit}\", gpus = {gpus} }}\n");
    }
    let image = dir.join("images").join("tranche-train");
    t += &format!(
        "\n[aws.images]\n\"{DEV_TRAINING_IMAGE}\" = \"{}\"\n\"{DEV_PYTORCH_IMAGES}\" = \"{}\"\n\n[aws.file_systems]\n\"fs-dev\" = \"{}\"\n",
        image.display(),
        image.display(),
        dir.join("data").display()
    );
    t
}

/// A fresh access key for `user` with `role`: its id and secret.
async fn issue_key(
    admin: &tranche_client::Client,
    user: &str,
    role: tranche_model::KeyRole,
) -> Result<(String, String), String> {
    let req = tranche_proto::ClientRequest::Write {
        request: None,
        command: tranche_proto::ClientCommand::IssueAccessKey {
            user: user.into(),
            role,
        },
    };
    match admin.request(&req).await {
        Ok(tranche_proto::Response::AccessKey { key, secret }) => Ok((key.id, secret)),
        Ok(other) => Err(crate::exit::unexpected_text(&other)),
        Err(e) => Err(format!("an access key for {user}: {e}")),
    }
}

/// The key secret file's name in the cluster's certificate dir.
pub const KEY_SECRET_FILE: &str = "key-secret";

#[derive(clap::Args, Debug)]
pub struct DevArgs {
    /// Keep the cluster's files (certs, configs, data, logs) here instead of a
    /// temporary dir that is removed at the end.
    #[arg(long)]
    dir: Option<PathBuf>,
    /// Ended jobs leave the controllers' state for their history store this many
    /// seconds after they end (the controllers' `[retention] job_hot_s`; the leader
    /// then looks for them as often, at least once a minute). Default: the
    /// controllers' own, a day.
    #[arg(long, value_name = "SECONDS")]
    job_hot_s: Option<u64>,
}

/// The controllers' `[retention]` table for `--job-hot-s`.
fn retention_config(job_hot_s: u64) -> String {
    format!(
        "\n[retention]\njob_hot_s = {job_hot_s}\ncheck_s = {}\n",
        job_hot_s.clamp(1, 60)
    )
}

/// Writes a secret (a token, a URL that carries one) to `<dir>/<name>`, readable by
/// this account only; returns its path.
fn secret_file(dir: &std::path::Path, name: &str, text: &str) -> Result<PathBuf, String> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let path = dir.join(name);
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&path)
        .map_err(|e| format!("{}: {e}", path.display()))?;
    f.write_all(format!("{text}\n").as_bytes())
        .map_err(|e| format!("{}: {e}", path.display()))?;
    Ok(path)
}

/// Makes the demo image the AWS examples name (`<dir>/images/tranche-train`, an OCI
/// layout of the machine's static busybox), and says what this machine lacks for
/// container jobs and what will then not work.
fn demo_image_and_tools(dir: &std::path::Path) -> Result<(), String> {
    use tranche_local::demo_image;
    let image = dir.join("images").join("tranche-train");
    match demo_image::static_busybox() {
        Some(bb) => {
            demo_image::make(&image, &bb)
                .map_err(|e| format!("the demo image {}: {e}", image.display()))?;
            step(&format!(
                "demo image: {} (busybox {}, entrypoint /entry.sh)",
                image.display(),
                bb.display()
            ));
        }
        None => step(&format!(
            "no static busybox here, so no demo image: the AWS examples' training image \
             ({}) does not exist and their jobs fail. Install busybox-static and start again, \
             or put a rootfs or an OCI image layout there.",
            image.display()
        )),
    }
    if demo_image::oci_runtime().is_none() {
        step(
            "no runc or crun here: jobs with an image (--image, and every SageMaker job) \
             FAIL; jobs on the host (the default) run. Install runc to run them.",
        );
    }
    Ok(())
}

fn step(msg: &str) {
    eprintln!("  {msg}");
}

/// A client config file (see `tranche logs --help`) for one certificate.
fn client_config(c: &LocalCluster, role: Role, name: &str) -> Result<PathBuf, String> {
    let files = c.issue(role, name)?;
    let controllers: Vec<String> = c
        .client_addrs()
        .iter()
        .map(|a| format!("\"{a}\""))
        .collect();
    let http: Vec<String> = c.http_urls().iter().map(|u| format!("\"{u}\"")).collect();
    let path = c.dir.join(format!("{role}-{name}.toml"));
    std::fs::write(
        &path,
        format!(
            "controllers = [{}]\nhttp = [{}]\n[tls]\nca = \"{}\"\ncert = \"{}\"\nkey = \"{}\"\n",
            controllers.join(", "),
            http.join(", "),
            files.ca.display(),
            files.cert.display(),
            files.key.display()
        ),
    )
    .map_err(|e| format!("{}: {e}", path.display()))?;
    Ok(path)
}

/// The `tranched` and `tranche-agent` binaries (see [`tranche_local::find_tranched`]),
/// or which one is missing and how to get it.
pub(crate) fn daemons() -> Result<(PathBuf, PathBuf), String> {
    let (tranched, agent) = (tranche_local::find_tranched(), tranche_local::find_agent());
    for b in [&tranched, &agent] {
        if !b.exists() {
            return Err(format!(
                "{} is missing: build it beside this tranche (`cargo build --bins`, with \
                 --release for target/release), or set $TRANCHED and $TRANCHE_AGENT",
                b.display()
            ));
        }
    }
    Ok((tranched, agent))
}

pub fn dev(args: &DevArgs) -> ExitCode {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("tokio runtime");
    match rt.block_on(run(args)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("tranche dev: {e}");
            ExitCode::from(2)
        }
    }
}

async fn run(args: &DevArgs) -> Result<(), String> {
    let tmp;
    let dir = match &args.dir {
        Some(d) => {
            std::fs::create_dir_all(d).map_err(|e| format!("{}: {e}", d.display()))?;
            d.canonicalize().map_err(|e| e.to_string())?
        }
        None => {
            tmp = tempfile::Builder::new()
                .prefix("tranche-dev-")
                .tempdir()
                .map_err(|e| e.to_string())?;
            tmp.path().to_path_buf()
        }
    };
    eprintln!("Starting a local Tranche cluster in {}", dir.display());
    let (tranched, agent) = daemons()?;
    demo_image_and_tools(&dir)?;
    let mut opts = LocalOptions::new(tranched);
    if std::env::var("TRANCHE_LOG").is_err() {
        opts.log_filter = "info,raft=warn".into();
    }
    // The AWS endpoint's key secret, beside the certificates (kept when --dir is
    // reused, so that keys issued before still sign).
    let key_secret = dir.join("certs").join(KEY_SECRET_FILE);
    opts.extra_config += &aws_config(&dir, &key_secret);
    if let Some(s) = args.job_hot_s {
        opts.extra_config += &retention_config(s);
    }
    let mut c = LocalCluster::create(&dir, 3, opts)?;
    if !key_secret.exists() {
        tranche_tls::keys::write_key_secret_file(&key_secret)?;
    }
    step("certificates: a CA, 3 controllers, an admin, 4 agents; a key secret for access keys");
    c.start_all()?;
    let admin = c.client(Role::Admin, "admin")?;
    let leader = c
        .wait_leader(&admin, Duration::from_secs(20))
        .await
        .ok_or("no leader elected within 20 s; see the controllers' logs")?;
    step(&format!("3 controllers up; leader is c{}", leader + 1));
    admin
        .apply_all(demo::dev_objects())
        .await
        .map_err(|e| format!("demo policy refused: {e}"))?;
    step("policy: queue q; shares research (RESERVE), vision (LEND), nlp (LEND_AND_BORROW)");
    for (node, gpus) in [
        ("n1", "4 x h100"),
        ("n2", "4 x h100"),
        ("n3", "4 x a100"),
        ("n4", "4 x a100"),
    ] {
        c.add_agent(&agent, node, gpus, "heartbeat_ms = 1000")?;
    }
    // Ready means the nodes are there: a drain or a submit right away finds them.
    tranche_local::wait_until(
        "the agents' nodes",
        std::time::Duration::from_secs(30),
        async || match admin.read(tranche_proto::Query::Nodes, false).await {
            Ok(tranche_proto::Response::Nodes(n)) if n.len() >= 4 => Ok(()),
            Ok(tranche_proto::Response::Nodes(n)) => {
                Err(format!("{} of 4 nodes registered", n.len()))
            }
            Ok(other) => Err(crate::exit::unexpected_text(&other)),
            Err(e) => Err(e.to_string()),
        },
    )
    .await?;
    step("4 agents: n1, n2 with 4 H100 each; n3, n4 with 4 A100 each");
    let account = tranche_local::job_account()?;
    step(&format!(
        "jobs run as the account {}, whoever submits them (the agents' [users] maps every name to it{})",
        account.name,
        if account.root { "; allow_root = true, as tranche dev runs as root" } else { "" }
    ));
    let admin_cfg = client_config(&c, Role::Admin, "admin")?;
    let user = std::env::var("USER")
        .ok()
        .filter(|u| tranche_tls::validate_name("user", u).is_ok())
        .unwrap_or_else(|| "dev".into());
    let user_cfg = client_config(&c, Role::User, &user)?;
    let operator_cfg = client_config(&c, Role::Operator, "ops")?;
    eprintln!();
    eprintln!("Ready. Point the CLI at it (as the user {user}; operator and admin configs are beside it):");
    println!("export TRANCHE_CONFIG={}", user_cfg.display());
    let user_files = tranche_tls::TlsFiles::in_dir(&c.certs, Role::User, &user);
    let token = tranche_tls::token::issue_token(&user_files, Duration::from_secs(8 * 3600))
        .map_err(|e| format!("a token for {user}: {e}"))?;
    let urls = c.http_urls();
    eprintln!(
        "  HTTPS API: {} (CA {}); the Python SDK (pip install ./python) reads the same config:",
        urls.join(" "),
        user_files.ca.display()
    );
    eprintln!("    python3 -c 'import tranche; print(tranche.Cluster.from_config().shares())'");
    // Tokens are long (over 1,000 characters): they go in files, the lines name them.
    let token_file = secret_file(&dir, &format!("token-{user}"), &token)?;
    eprintln!("  or, with no certificate, a bearer token for {user} (8 hours):");
    eprintln!(
        "    export TRANCHE_URL={} TRANCHE_CA={} TRANCHE_TOKEN=$(cat {})",
        urls.first().cloned().unwrap_or_default(),
        user_files.ca.display(),
        token_file.display()
    );
    // The dashboard's URL carries an admin token in its fragment, which the browser
    // never sends to a server; the page moves it to the tab's sessionStorage.
    let admin_files = tranche_tls::TlsFiles::in_dir(&c.certs, Role::Admin, "admin");
    let admin_token = tranche_tls::token::issue_token(&admin_files, Duration::from_secs(8 * 3600))
        .map_err(|e| format!("a token for the admin: {e}"))?;
    let ui = format!("{}/ui/", urls.first().cloned().unwrap_or_default());
    let admin_token_file = secret_file(&dir, "token-admin", &admin_token)?;
    let ui_file = secret_file(&dir, "dashboard-url", &format!("{ui}#token={admin_token}"))?;
    eprintln!(
        "  Dashboard: {ui} (the browser will not know the cluster's CA {}: trust it or accept the warning);",
        user_files.ca.display()
    );
    eprintln!(
        "    log in with the admin's token in {} (8 hours), or open the URL in {}, which logs in at once",
        admin_token_file.display(),
        ui_file.display()
    );
    let key = issue_key(&admin, &user, tranche_model::KeyRole::User).await?;
    let admin_key = issue_key(&admin, "admin", tranche_model::KeyRole::Admin).await?;
    std::fs::create_dir_all(dir.join("images")).map_err(|e| e.to_string())?;
    std::fs::create_dir_all(dir.join("data")).map_err(|e| e.to_string())?;
    eprintln!(
        "  AWS Batch-compatible endpoint (boto3, the AWS CLI, the SageMaker SDK), as {user}:"
    );
    // SageMaker's DescribeTrainingJob and CloudWatch Logs are served on the same
    // listener, dispatched by their `X-Amz-Target`, and S3 by its signature's scope;
    // IAM is refused at once (the SageMaker SDK probes it, and carries on without it).
    let endpoint = urls.first().cloned().unwrap_or_default();
    eprintln!(
        "    export AWS_ENDPOINT_URL_BATCH={endpoint} AWS_ENDPOINT_URL_SAGEMAKER={endpoint} AWS_ENDPOINT_URL_CLOUDWATCH_LOGS={endpoint} AWS_ENDPOINT_URL_S3={endpoint} AWS_ENDPOINT_URL_IAM={endpoint} AWS_CA_BUNDLE={} AWS_DEFAULT_REGION=us-west-2 AWS_ACCESS_KEY_ID={} AWS_SECRET_ACCESS_KEY={}",
        user_files.ca.display(),
        key.0,
        key.1
    );
    eprintln!(
        "  and as the admin, who manages quota shares:\n    export AWS_ACCESS_KEY_ID={} AWS_SECRET_ACCESS_KEY={}",
        admin_key.0, admin_key.1
    );
    eprintln!(
        "    instance types: {}; training images {} and {} = {}; file system fs-dev = {}",
        DEV_INSTANCE_TYPES
            .iter()
            .map(|(n, u, g)| format!("{n} = {g} x {u}"))
            .collect::<Vec<_>>()
            .join(", "),
        DEV_TRAINING_IMAGE,
        DEV_PYTORCH_IMAGES,
        dir.join("images").join("tranche-train").display(),
        dir.join("data").display()
    );
    eprintln!("  operator: {}", operator_cfg.display());
    eprintln!("  admin:    {}", admin_cfg.display());
    eprintln!("Try: tranche submit --share nlp --gpus 2 -- sh -c 'nvidia-smi || echo $CUDA_VISIBLE_DEVICES'; tranche jobs");
    eprintln!("Ctrl-C stops everything.");
    wait_for_stop().await;
    eprintln!("\nStopping the agents, their jobs and the controllers...");
    for i in 0..c.agents.len() {
        c.kill_agent(i);
        // What its jobs left running (their shims outlive the agent).
        let _ = std::process::Command::new(&agent)
            .arg("stop-jobs")
            .arg("--spool")
            .arg(&c.agents[i].spool)
            .status();
    }
    for i in 0..c.controllers.len() {
        c.stop(i);
    }
    drop(c);
    eprintln!("Stopped.");
    Ok(())
}

async fn wait_for_stop() {
    use tokio::signal::unix::{signal, SignalKind};
    let mut term = signal(SignalKind::terminate()).expect("SIGTERM handler");
    let mut int = signal(SignalKind::interrupt()).expect("SIGINT handler");
    tokio::select! {
        _ = term.recv() => {}
        _ = int.recv() => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_catalog_runs_awss_pytorch_images_as_the_demo_image() {
        let dir = std::path::Path::new("/tmp/dev");
        let t: toml::Value = toml::from_str(&aws_config(dir, &dir.join("key"))).unwrap();
        let images = t["aws"]["images"].as_table().unwrap();
        let demo = dir.join("images").join("tranche-train");
        for key in [DEV_TRAINING_IMAGE, DEV_PYTORCH_IMAGES] {
            assert_eq!(
                images[key].as_str(),
                demo.to_str(),
                "{key} runs as the demo image"
            );
        }
    }
}
