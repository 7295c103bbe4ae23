//! `tranche`: the command users, operators and admins run. This binary only parses
//! arguments; the work lives in the library crates and in this crate's modules.

mod admin_cmds;
mod alloc;
mod apply;
mod bench;
mod client_cfg;
mod dev;
mod fmt;
mod history;
mod job_list;
mod keys;
mod leader_cache;
mod logs;
mod output;
mod report;
mod sim_cmd;
mod sim_report;
mod timing;
mod token;
mod user_cmds;

use clap::{Parser, Subcommand};
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(Parser)]
#[command(
    name = "tranche",
    version,
    about = "Tranche: quota-share GPU scheduling for bare-metal racks"
)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Try a policy in virtual time: the real state machine and scheduler, simulated jobs.
    #[command(subcommand)]
    Scenario(ScenarioCmd),
    /// Replay a job trace under a policy in virtual time and report utilization, waits,
    /// the quota guarantee and preemptions (with --report, plots too).
    ///
    /// Example: tranche sim --trace jobs.csv --policy policy.toml --nodes "64 x 8 h100" --compare
    Sim(sim_cmd::SimArgs),
    /// Benchmarks.
    #[command(subcommand)]
    Bench(bench::BenchCmd),
    /// The cluster's CA and the certificates of controllers, agents, admins, operators
    /// and users.
    #[command(subcommand)]
    Certs(CertsCmd),
    /// Submit a job.
    ///
    /// Example: tranche submit --share vision --gpus 8 --time 4h -- python train.py
    Submit(user_cmds::SubmitArgs),
    /// List jobs (like squeue); with --history, the jobs that have ended (like sacct).
    ///
    /// Example: tranche jobs --me --state RUNNING
    ///
    /// Example: tranche jobs --history --since 7d --state FAILED
    Jobs(user_cmds::JobsArgs),
    /// Everything about one job: attempts, allocation, transitions with reasons.
    ///
    /// Example: tranche show 42
    Show(user_cmds::ShowArgs),
    /// Cancel jobs (running ones get their checkpoint signal and grace first).
    ///
    /// Example: tranche cancel 42 43
    Cancel(user_cmds::CancelArgs),
    /// Keep waiting jobs PENDING until released.
    ///
    /// Example: tranche hold 42
    Hold(user_cmds::JobsRefArgs),
    /// Let held jobs start (once their dependencies are satisfied).
    ///
    /// Example: tranche release 42
    Release(user_cmds::JobsRefArgs),
    /// Create or update environments, policies, queues and quota shares from a file,
    /// idempotently; prints what changed.
    ///
    /// Example: tranche apply -f policy.toml --dry-run
    Apply(apply::ApplyArgs),
    /// Change a waiting or running job's priority.
    ///
    /// Example: tranche update 42 --priority 90
    Update(admin_cmds::UpdateArgs),
    /// Why a job waits, with numbers.
    ///
    /// Example: tranche explain 42
    Explain(admin_cmds::JobArg),
    /// Nodes, their state and GPUs per unit (like sinfo).
    ///
    /// Example: tranche nodes -R
    Nodes(admin_cmds::NodesArgs),
    /// Drain nodes: nothing new is placed there (`--now` also stops their jobs).
    ///
    /// Example: tranche drain gpu07 --reason "PSU swap"
    Drain(admin_cmds::DrainArgs),
    /// Put drained nodes back in service.
    ///
    /// Example: tranche resume gpu07
    Resume(admin_cmds::ResumeArgs),
    /// Per quota share: strategy, max, used, lent, borrowed, running, waiting.
    ///
    /// Example: tranche shares
    Shares(admin_cmds::ListArgs),
    /// The front of the queue and of every share.
    ///
    /// Example: tranche queue
    Queue(admin_cmds::ListArgs),
    /// The controllers: members, leader, term, commit and applied index, lag; or add and
    /// remove one.
    ///
    /// Example: tranche controllers
    Controllers(admin_cmds::ControllersArgs),
    /// A whole local cluster on loopback: 3 controllers, 4 agents with fake GPUs, a demo
    /// policy. Prints the line that points the CLI at it; Ctrl-C stops everything.
    ///
    /// Example: tranche dev
    Dev(dev::DevArgs),
    /// Shell completions for bash, zsh, fish, elvish or powershell.
    ///
    /// Example: tranche completions bash > /etc/bash_completion.d/tranche
    Completions { shell: clap_complete::Shell },
    /// Who used the GPUs, and who lent to whom: GPU-hours used, borrowed, lent, kept
    /// idle by RESERVE and lost to preemption (like sreport).
    ///
    /// Example: tranche report --since 2026-11-01 --by user
    Report(report::ReportArgs),
    /// Bearer tokens for the HTTPS API, for this config's certificate.
    ///
    /// Example: export TRANCHE_TOKEN=$(tranche token issue --ttl 8h)
    #[command(subcommand)]
    Token(token::TokenCmd),
    /// Access keys for the AWS Batch-compatible endpoint (SigV4): issue, list, revoke.
    ///
    /// Example: eval "$(tranche keys issue)"
    #[command(subcommand)]
    Keys(keys::KeysCmd),
    /// A job's output, from the agent of the node it ran on.
    ///
    /// Example: tranche logs 42 -f
    Logs(logs::LogsArgs),
}

#[derive(Subcommand)]
enum ScenarioCmd {
    /// Run a scenario file and check its expectations.
    ///
    /// Exit status: 0 when every expectation holds, 1 when one fails, 2 when the file
    /// is invalid.
    ///
    /// Example: tranche scenario run tests/scenarios/reclaim.toml
    Run {
        /// The scenario file (TOML, version 1).
        file: PathBuf,
        /// One JSON object per transition, then a summary object.
        #[arg(long)]
        json: bool,
    },
}

#[derive(Subcommand)]
enum CertsCmd {
    /// Create the cluster CA: ca.pem (copy it to every node) and ca.key (mode 0600; keep
    /// it on the admin's machine only).
    ///
    /// Refuses to replace an existing CA unless --force is given: a new CA makes every
    /// certificate the old one issued untrusted. Prints the paths it wrote.
    ///
    /// Example: tranche certs init --dir /etc/tranche/certs --cluster lab
    Init {
        /// Directory to write to [default: $TRANCHE_CERTS, else ./certs].
        #[arg(long)]
        dir: Option<PathBuf>,
        /// The cluster's name, written into the CA's subject.
        #[arg(long, default_value = "tranche")]
        cluster: String,
        /// Replace an existing CA.
        #[arg(long)]
        force: bool,
    },
    /// Issue a certificate and key for a role and name, signed by the cluster CA.
    ///
    /// Writes <out>/<role>-<name>.pem, <out>/<role>-<name>.key (mode 0600) and, when
    /// <out> is not the CA directory, a copy of ca.pem; prints the paths it wrote.
    /// Existing files of the same names are replaced.
    ///
    /// Example: tranche certs issue --role controller --name c1 --host 10.0.0.1
    Issue {
        /// controller, agent, admin, operator or user.
        #[arg(long)]
        role: tranche_tls::Role,
        /// The holder's name (the node name for an agent, the user name for a user): 1
        /// to 63 characters of a-z, 0-9, '-', '_' and '.', starting with a letter or
        /// digit.
        #[arg(long)]
        name: String,
        /// A DNS name or IP address the controller is reached at (controllers only;
        /// repeatable). Clients always verify the name controller.tranche, which every
        /// controller certificate carries.
        #[arg(long = "host")]
        hosts: Vec<String>,
        /// The CA directory, holding ca.pem and ca.key [default: $TRANCHE_CERTS, else
        /// ./certs].
        #[arg(long)]
        dir: Option<PathBuf>,
        /// Directory to write the certificate to [default: the CA directory].
        #[arg(long)]
        out: Option<PathBuf>,
        /// Days the certificate is valid.
        #[arg(long, default_value_t = 365)]
        days: u32,
    },
    /// Revoke a certificate: add it to the CA's revocation list, crl.pem in the CA
    /// directory.
    ///
    /// Keeps every certificate listed already and signs the new list with the CA key
    /// under the next CRL number; revoking a listed certificate again changes nothing.
    /// Prints the path of crl.pem. Daemons and clients read the list named by `crl` in
    /// their [tls] table when they start: copy crl.pem to every node, then restart the
    /// controllers one at a time and the agents.
    ///
    /// Example: tranche certs revoke --dir /etc/tranche/certs --cert user-mallory.pem
    #[command(group(clap::ArgGroup::new("what").required(true).args(["cert", "serial"])))]
    Revoke {
        /// The CA directory, holding ca.pem and ca.key [default: $TRANCHE_CERTS, else
        /// ./certs].
        #[arg(long, visible_alias = "ca-dir")]
        dir: Option<PathBuf>,
        /// The certificate to revoke (a PEM file issued by this CA).
        #[arg(long)]
        cert: Option<PathBuf>,
        /// Or its serial number, in hex (colons allowed), as `openssl x509 -noout
        /// -serial` prints it.
        #[arg(long)]
        serial: Option<String>,
    },
}

/// The system's malloc for short commands, mimalloc for long-running ones (see
/// [`alloc`]).
#[global_allocator]
static GLOBAL: alloc::Alloc = alloc::Alloc;

fn main() -> ExitCode {
    timing::mark("main");
    let cli = Cli::parse();
    timing::mark("args");
    if matches!(
        cli.cmd,
        Cmd::Scenario(_) | Cmd::Sim(_) | Cmd::Bench(_) | Cmd::Dev(_)
    ) {
        alloc::use_mimalloc();
    }
    match cli.cmd {
        Cmd::Scenario(ScenarioCmd::Run { file, json }) => scenario_run(&file, json),
        Cmd::Sim(args) => sim_cmd::sim(&args),
        Cmd::Bench(cmd) => bench::bench(cmd),
        Cmd::Certs(cmd) => certs(cmd),
        Cmd::Logs(args) => logs::logs(&args),
        Cmd::Report(args) => report::report(&args),
        Cmd::Dev(args) => dev::dev(&args),
        Cmd::Token(cmd) => token::token(cmd),
        Cmd::Keys(cmd) => keys::keys(cmd),
        Cmd::Completions { shell } => {
            use clap::CommandFactory;
            clap_complete::generate(
                shell,
                &mut Cli::command(),
                "tranche",
                &mut std::io::stdout(),
            );
            ExitCode::SUCCESS
        }
        Cmd::Submit(args) => user_cmds::submit_cmd(args),
        Cmd::Jobs(args) => user_cmds::jobs(&args),
        Cmd::Show(args) => user_cmds::show(&args),
        Cmd::Cancel(args) => user_cmds::cancel(&args),
        Cmd::Hold(args) => user_cmds::hold(&args),
        Cmd::Release(args) => user_cmds::release(&args),
        Cmd::Update(args) => admin_cmds::update(&args),
        Cmd::Apply(args) => apply::apply(&args),
        Cmd::Explain(args) => admin_cmds::explain(&args),
        Cmd::Nodes(args) => admin_cmds::nodes(&args),
        Cmd::Drain(args) => admin_cmds::drain(&args),
        Cmd::Resume(args) => admin_cmds::resume(&args),
        Cmd::Shares(args) => admin_cmds::shares(&args),
        Cmd::Queue(args) => admin_cmds::queue(&args),
        Cmd::Controllers(args) => admin_cmds::controllers(&args),
    }
}

/// The certificate directory when --dir is not given: `$TRANCHE_CERTS`, else `./certs`.
fn default_certs_dir() -> PathBuf {
    std::env::var_os("TRANCHE_CERTS")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("certs"))
}

fn certs(cmd: CertsCmd) -> ExitCode {
    let written: Result<Vec<PathBuf>, tranche_tls::TlsError> = match cmd {
        CertsCmd::Init {
            dir,
            cluster,
            force,
        } => {
            let dir = dir.unwrap_or_else(default_certs_dir);
            tranche_tls::init_ca(&dir, &cluster, force)
                .map(|ca| vec![ca, dir.join(tranche_tls::CA_KEY_FILE)])
        }
        CertsCmd::Issue {
            role,
            name,
            hosts,
            dir,
            out,
            days,
        } => {
            let dir = dir.unwrap_or_else(default_certs_dir);
            let out = out.unwrap_or_else(|| dir.clone());
            tranche_tls::issue(&dir, &out, role, &name, &hosts, days).map(|files| {
                let copied_ca = match (dir.canonicalize(), out.canonicalize()) {
                    (Ok(a), Ok(b)) => a != b,
                    _ => dir != out,
                };
                let mut paths = vec![files.cert, files.key];
                if copied_ca {
                    paths.push(files.ca);
                }
                paths
            })
        }
        CertsCmd::Revoke { dir, cert, serial } => {
            let dir = dir.unwrap_or_else(default_certs_dir);
            let target = match (cert, serial) {
                (Some(c), _) => tranche_tls::RevokeTarget::Cert(c),
                (None, Some(s)) => tranche_tls::RevokeTarget::Serial(s),
                (None, None) => unreachable!("clap requires --cert or --serial"),
            };
            tranche_tls::revoke(&dir, &target).map(|r| {
                let who = r.identity.map(|i| format!(" ({i})")).unwrap_or_default();
                if r.already_revoked {
                    eprintln!(
                        "serial {}{who} was revoked already; {} unchanged",
                        r.serial,
                        r.crl.display()
                    );
                } else {
                    eprintln!(
                        "revoked serial {}{who}; the list names {} certificate(s), CRL number {}",
                        r.serial, r.revoked, r.crl_number
                    );
                }
                vec![r.crl]
            })
        }
    };
    match written {
        Ok(paths) => {
            for p in paths {
                println!("{}", p.display());
            }
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::from(2)
        }
    }
}

fn scenario_run(file: &PathBuf, json: bool) -> ExitCode {
    let text = match std::fs::read_to_string(file) {
        Ok(t) => t,
        Err(e) => {
            eprintln!("error: cannot read {}: {e}", file.display());
            return ExitCode::from(2);
        }
    };
    let sc = match tranche_sim::Scenario::parse(&text) {
        Ok(sc) => sc,
        Err(e) => {
            eprintln!("error: {}: {e}", file.display());
            return ExitCode::from(2);
        }
    };
    let report = match tranche_sim::run(&sc) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("error: {}: {e}", file.display());
            return ExitCode::from(2);
        }
    };
    if json {
        print!("{}", tranche_sim::render_json(&report));
    } else {
        print!("{}", tranche_sim::render_text(&report));
    }
    if report.passed() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    }
}
