//! Security against real `tranched` processes on 127.0.0.1: certificates that are
//! refused at the handshake (none, expired, not yet valid, revoked, from another CA, of
//! the wrong role), and what each role may not do once it is in.

use std::time::{Duration, SystemTime};

use tranche_client::{Client, ClientError};
use tranche_local::rig::{self, job, rt, serial};
use tranche_local::{demo, wait_until, LocalCluster};
use tranche_model::JobStatus;
use tranche_proto::{
    frame, ApiError, ClientCommand, ClientRequest, JobFilter, MembershipChange, Query, Response,
    StateDigest,
};
use tranche_state::Progress;
use tranche_tls::{issue_valid_between, revoke, RevokeTarget, Role, TlsFiles};

/// The binary these tests run.
const TRANCHED: &str = env!("CARGO_BIN_EXE_tranched");

const DAY: Duration = Duration::from_secs(86_400);

/// Three controllers, not started yet.
fn create(dir: &std::path::Path) -> LocalCluster {
    LocalCluster::create(dir, 3, rig::options(TRANCHED, "")).unwrap()
}

/// An admin client once a leader is elected and the demo policy is in place.
async fn ready(c: &mut LocalCluster) -> Client {
    let (admin, _) = rig::leader(c, Duration::from_secs(15)).await;
    rig::apply(&admin, demo::objects()).await;
    admin
}

/// The state digest of every controller, once they have applied the same index and
/// agree there.
async fn digest(c: &LocalCluster, admin: &Client) -> StateDigest {
    let agreed = wait_until(
        "the same applied index and digest",
        Duration::from_secs(30),
        async || {
            let mut ds = Vec::new();
            for i in 0..c.controllers.len() {
                let addr: std::net::SocketAddr =
                    c.controllers[i].member.client_addr.parse().unwrap();
                let idx = admin.controllers().iter().position(|a| *a == addr).unwrap();
                let q = ClientRequest::Read {
                    query: Query::Digest,
                    stale: true,
                };
                if let Ok(Response::Digest(d)) = admin.request_to(idx, &q).await {
                    ds.push(d);
                }
            }
            if ds.len() == c.controllers.len()
                && ds
                    .windows(2)
                    .all(|w| w[0].applied == w[1].applied && w[0].digest == w[1].digest)
            {
                Ok(ds.swap_remove(0))
            } else {
                Err(format!("{ds:?}"))
            }
        },
    )
    .await;
    agreed.unwrap_or_else(|e| panic!("controllers disagree: {e}"))
}

/// Sends each command; each must be refused as unauthorized, with a message that
/// contains its text.
async fn all_unauthorized(client: &Client, cases: Vec<(ClientCommand, &str)>) {
    for (cmd, want) in cases {
        let what = format!("{cmd:?}");
        let r = client.command(cmd).await;
        assert!(
            matches!(&r, Ok(Err(ApiError::Unauthorized(m))) if m.contains(want)),
            "{what}: expected unauthorized ({want:?}), got {r:?}"
        );
    }
}

fn read_refused(r: Result<Response, ClientError>, what: &str) {
    assert!(
        matches!(&r, Err(ClientError::Api(ApiError::Unauthorized(_)))),
        "{what}: {r:?}"
    );
}

#[test]
fn refused_certificates_get_a_clear_error_and_change_nothing() {
    let _g = serial();
    let dir = tempfile::tempdir().unwrap();
    let mut c = create(dir.path());
    let now = SystemTime::now();
    let expired = issue_valid_between(
        &c.certs,
        &c.certs,
        Role::Admin,
        "expired",
        now - 3 * DAY,
        now - DAY,
    )
    .unwrap();
    let early = issue_valid_between(
        &c.certs,
        &c.certs,
        Role::Admin,
        "early",
        now + DAY,
        now + 3 * DAY,
    )
    .unwrap();
    let gone = c.issue(Role::Admin, "gone").unwrap();
    let crl = revoke(&c.certs, &RevokeTarget::Cert(gone.cert.clone()))
        .unwrap()
        .crl;
    let other = dir.path().join("other-ca");
    tranche_tls::init_ca(&other, "other", false).unwrap();
    let stranger = tranche_tls::issue(&other, &other, Role::Admin, "admin", &[], 1).unwrap();
    let foreign = TlsFiles {
        ca: c.certs.join("ca.pem"),
        ..stranger
    };
    // Every controller reads the revocation list at start. `[tls]` is the last table
    // of the configs LocalCluster writes, so an appended key lands in it.
    for ctl in &c.controllers {
        let mut text = std::fs::read_to_string(&ctl.config).unwrap();
        assert!(text.contains("\n[tls]\n") && !text.contains("crl ="));
        text += &format!("crl = \"{}\"\n", crl.display());
        std::fs::write(&ctl.config, text).unwrap();
    }
    c.start_all().unwrap();
    rt().block_on(async {
        let admin = ready(&mut c).await;
        let before = digest(&c, &admin).await;

        for (what, files, alert, why) in [
            (
                "expired",
                &expired,
                "certificate_expired",
                "certificate expired",
            ),
            (
                "not yet valid",
                &early,
                "certificate_expired",
                "not valid yet",
            ),
            ("revoked", &gone, "certificate_revoked", "Revoked"),
            ("from another CA", &foreign, "unknown_ca", "UnknownIssuer"),
        ] {
            // Refused by every controller once, not retried: with an hour to retry
            // in, the answer still comes (a minute is a generous bound for three
            // handshakes).
            let mut client = Client::new(c.client_addrs(), files).unwrap();
            client.retry_for = Duration::from_secs(3600);
            let r = tokio::time::timeout(
                Duration::from_secs(60),
                client.command(ClientCommand::DeleteShare("lend".into())),
            )
            .await
            .unwrap_or_else(|_| panic!("{what}: a refused handshake is being retried"));
            match &r {
                Err(e @ ClientError::Refused { reason, .. }) => {
                    assert!(
                        reason.contains("refused this client's certificate")
                            && reason.contains(alert)
                            && reason.contains(why),
                        "{what}: {e}"
                    );
                    eprintln!("{what}: {e}");
                }
                other => panic!("{what}: expected a refused handshake, got {other:?}"),
            }
            let r = client.read(Query::Shares, true).await;
            assert!(
                matches!(&r, Err(ClientError::Refused { .. })),
                "{what}: {r:?}"
            );
        }

        // No certificate at all.
        let mut roots = rustls::RootCertStore::empty();
        for cert in tranche_tls::load_certs(&c.certs.join("ca.pem")).unwrap() {
            roots.add(cert).unwrap();
        }
        let provider = std::sync::Arc::new(rustls::crypto::ring::default_provider());
        let mut tls = rustls::ClientConfig::builder_with_provider(provider)
            .with_protocol_versions(&[&rustls::version::TLS13])
            .unwrap()
            .with_root_certificates(roots)
            .with_no_client_auth();
        tls.alpn_protocols = vec![tranche_tls::ALPN.to_vec()];
        let qc = quinn::crypto::rustls::QuicClientConfig::try_from(tls).unwrap();
        let anon =
            Client::with_config(c.client_addrs(), quinn::ClientConfig::new(std::sync::Arc::new(qc)))
                .unwrap();
        let r = anon.read(Query::Shares, true).await;
        assert!(
            matches!(&r, Err(ClientError::Refused { reason, .. }) if reason.contains("certificate_required")),
            "{r:?}"
        );

        // The controllers log each refusal with its reason.
        let logs: String = c
            .controllers
            .iter()
            .map(|ctl| std::fs::read_to_string(&ctl.log).unwrap_or_default())
            .collect();
        for why in [
            "certificate expired",
            "not valid yet",
            "Revoked",
            "UnknownIssuer",
        ] {
            assert!(
                logs.lines()
                    .any(|l| l.contains("refused a client's TLS handshake") && l.contains(why)),
                "no refusal logged for {why}"
            );
        }

        // The wrong role on the peer port: only controllers speak raft.
        let peer_addr = c.controllers[0].member.peer_addr.parse().unwrap();
        for (role, name) in [
            (Role::Admin, "admin"),
            (Role::Agent, "n1"),
            (Role::User, "alice"),
        ] {
            let files = c.issue(role, name).unwrap();
            let on_peer = Client::new(vec![peer_addr], &files).unwrap();
            let q = ClientRequest::Read {
                query: Query::Shares,
                stale: true,
            };
            match on_peer.request_to(0, &q).await {
                Err(ClientError::Closed { reason, .. }) => {
                    assert!(reason.contains("only controller certificates"), "{reason}")
                }
                other => panic!("the peer port accepted {role}:{name}: {other:?}"),
            }
        }

        // Nothing changed, on any controller; a good certificate still works.
        let after = digest(&c, &admin).await;
        assert_eq!(after.digest, before.digest);
        let shares = admin.read(Query::Shares, false).await;
        assert!(matches!(shares, Ok(Response::Shares(s)) if s.len() == 4));

        // A controller whose own certificate is revoked does not start, and says why.
        // (The running controllers read the list at their start, so revoking c4 now
        // changes nothing for them.)
        let j = c.prepare_joiner(4).unwrap();
        let c4 = TlsFiles::in_dir(&c.certs, Role::Controller, "c4");
        revoke(&c.certs, &RevokeTarget::Cert(c4.cert.clone())).unwrap();
        let mut text = std::fs::read_to_string(&c.controllers[j].config).unwrap();
        text += &format!("crl = \"{}\"\n", crl.display());
        std::fs::write(&c.controllers[j].config, text).unwrap();
        c.start(j).unwrap();
        wait_until("the controller with a revoked certificate exits", Duration::from_secs(30), async || {
            match c.is_running(j) {
                false => Ok(()),
                true => Err("a controller with a revoked certificate runs".into()),
            }
        })
        .await
        .unwrap();
        let log = std::fs::read_to_string(&c.controllers[j].log).unwrap();
        assert!(
            log.contains("controller-c4.pem") && log.contains("revoked"),
            "{log}"
        );
        let r = admin.read(Query::Shares, false).await;
        assert!(r.is_ok(), "{r:?}");
    });
}

#[test]
fn users_touch_only_their_own_jobs_and_shares() {
    let _g = serial();
    let dir = tempfile::tempdir().unwrap();
    let mut c = create(dir.path());
    c.start_all().unwrap();
    rt().block_on(async {
        let admin = ready(&mut c).await;
        let alice = c.client(Role::User, "alice").unwrap();
        let bob = c.client(Role::User, "bob").unwrap();
        let mallory = c.client(Role::User, "mallory").unwrap();

        // `private` lists only alice; she may submit there.
        let (alices, _) = alice
            .submit(demo::job("private", "alice", "a1"))
            .await
            .unwrap();
        let mut spec = demo::job("lend", "bob", "b1");
        spec.priority = 5;
        let (bobs, _) = bob.submit(spec).await.unwrap();
        // (The scheduler keeps the jobs' pending reasons current, so the state digest
        // may move; the objects and the jobs' specs and states may not.)
        let objects = || async { format!("{:?}", admin.read(Query::Objects, false).await) };
        let before = objects().await;

        let cancel = |job: tranche_model::JobId| ClientCommand::Cancel {
            job: job.into(),
            reason: "mine now".into(),
        };
        let priority = |job: tranche_model::JobId| ClientCommand::UpdatePriority {
            job: job.into(),
            // Within the share's cap on users' priorities (hostile_limits.rs tests it).
            priority: 99,
        };
        let not_admin = "only an admin";
        all_unauthorized(
            &mallory,
            vec![
                (
                    ClientCommand::Submit(demo::job("private", "mallory", "m1")),
                    "not a member of share private",
                ),
                (
                    ClientCommand::Submit(demo::job("lend", "bob", "m2")),
                    "may submit only as itself",
                ),
                (cancel(bobs), "belongs to bob"),
                (priority(bobs), "belongs to bob"),
                (ClientCommand::DeleteShare("lend".into()), not_admin),
                (
                    ClientCommand::PutShare(demo::share(
                        "private",
                        tranche_model::Strategy::Lend,
                        8,
                        &["mallory"],
                    )),
                    not_admin,
                ),
                (
                    ClientCommand::DrainNode {
                        node: "n1".into(),
                        reason: "x".into(),
                        now: true,
                    },
                    "only operator and admin",
                ),
            ],
        )
        .await;
        all_unauthorized(
            &bob,
            vec![
                (
                    ClientCommand::Submit(demo::job("private", "bob", "b0")),
                    "not a member of share private",
                ),
                (cancel(alices), "belongs to alice"),
                (priority(alices), "belongs to alice"),
            ],
        )
        .await;
        // Alice may use a share bob may not, but not bob's job.
        all_unauthorized(&alice, vec![(cancel(bobs), "belongs to bob")]).await;
        for req in [
            ClientRequest::Membership(MembershipChange::Remove { id: 1 }),
            ClientRequest::Isolate { from: vec![2] },
        ] {
            let r = mallory.request(&req).await;
            assert!(
                matches!(&r, Ok(Response::Error(ApiError::Unauthorized(_)))),
                "{req:?}: {r:?}"
            );
        }
        read_refused(mallory.read(node_work("n1"), false).await, "node work");

        // Nothing changed: the objects are as they were, the jobs as their owners left
        // them.
        assert_eq!(objects().await, before);
        for (id, priority) in [(bobs, 5), (alices, 0)] {
            let j = job(&admin, id).await;
            assert_eq!(j.spec.priority, priority);
            assert_ne!(j.status, JobStatus::Cancelled);
        }

        // Bob himself may do both.
        for cmd in [priority(bobs), cancel(bobs)] {
            let r = bob.command(cmd).await;
            assert!(matches!(r, Ok(Ok(_))), "{r:?}");
        }
        let jobs = match admin.read(Query::Jobs(JobFilter::default()), false).await {
            Ok(Response::Jobs(j)) => j,
            other => panic!("{other:?}"),
        };
        let mut owners: Vec<_> = jobs.iter().map(|j| j.user.as_str().to_string()).collect();
        owners.sort();
        assert_eq!(owners, ["alice", "bob"]);
    });
}

fn node_work(node: &str) -> Query {
    Query::NodeWork {
        node: node.into(),
        after: None,
        wait_ms: 0,
    }
}

#[test]
fn an_agent_certificate_speaks_only_for_its_own_node() {
    let _g = serial();
    let dir = tempfile::tempdir().unwrap();
    let mut c = create(dir.path());
    c.start_all().unwrap();
    rt().block_on(async {
        let admin = ready(&mut c).await;
        let n1 = c.client(Role::Agent, "n1").unwrap();
        let n2 = c.client(Role::Agent, "n2").unwrap();
        let bob = c.client(Role::User, "bob").unwrap();

        for (agent, node, gpus) in [(&n1, "n1", 2), (&n2, "n2", 1)] {
            let r = agent
                .command(ClientCommand::RegisterNode(demo::node(node, gpus)))
                .await;
            assert!(matches!(r, Ok(Ok(_))), "{r:?}");
        }
        let r = n1.read(node_work("n1"), false).await;
        assert!(matches!(r, Ok(Response::NodeWork(_))), "{r:?}");

        // A job lands on n2 (best fit: the node left with the fewest free GPUs; in the
        // RESERVE share, since the demo policy keeps its 16 GPUs for it).
        let (id, _) = bob.submit(demo::job("reserve", "bob", "b1")).await.unwrap();
        let placed = wait_until("the job placed", Duration::from_secs(30), async || {
            let j = job(&admin, id).await;
            match j.attempts.is_empty() {
                false => Ok(j),
                true => Err(format!("{j:?}")),
            }
        })
        .await
        .unwrap();
        assert_eq!(placed.attempts[0].allocation[0].node.as_str(), "n2");
        let attempt = placed.attempts[0].number;

        // n1 speaks only for n1, and uses no user or admin command.
        let for_that_node = "only the agent certificate of that node";
        let not_operator = "only operator and admin";
        let own_node = "only on attempts placed on its own node";
        let drain = |node: &str, now| ClientCommand::DrainNode {
            node: node.into(),
            reason: "x".into(),
            now,
        };
        let progress = |event| ClientCommand::JobProgress {
            job: id,
            attempt,
            event,
        };
        all_unauthorized(
            &n1,
            vec![
                (ClientCommand::RegisterNode(demo::node("n2", 1)), for_that_node),
                (drain("n2", false), not_operator),
                (drain("n1", true), not_operator),
                (ClientCommand::ResumeNode { node: "n1".into() }, not_operator),
                (progress(Progress::Running), own_node),
                (
                    progress(Progress::Exited {
                        code: Some(0),
                        reason: None,
                    }),
                    own_node,
                ),
                (
                    ClientCommand::Submit(demo::job("lend", "n1", "n1")),
                    "only user and admin",
                ),
                (
                    ClientCommand::Cancel {
                        job: id.into(),
                        reason: "x".into(),
                    },
                    "may not cancel",
                ),
                (
                    ClientCommand::UpdatePriority {
                        job: id.into(),
                        priority: 1,
                    },
                    "may not cancel, update, hold or release",
                ),
                (ClientCommand::DeleteShare("lend".into()), "only an admin"),
            ],
        )
        .await;
        // Nor may it heartbeat for another node.
        let r = n1.heartbeat("n2".into()).await;
        assert!(
            matches!(&r, Err(ClientError::Api(ApiError::Unauthorized(m))) if m.contains("may heartbeat for it")),
            "{r:?}"
        );
        // Leader-only commands have no client form: a write whose command tag is past
        // the client commands (here the log's `NodeDown`) does not decode, and the
        // controller says so.
        let mut body = vec![0u8, 0, 17];
        body.extend(tranche_state::codec::encode(&("n2", "x")));
        let mut bytes = frame::encode(&());
        bytes.extend(&body);
        let n = (bytes.len() - 4) as u32;
        bytes[0..4].copy_from_slice(&n.to_be_bytes());
        let r = n1.raw_to(0, &bytes).await;
        assert!(
            matches!(&r, Ok(Response::Error(ApiError::BadRequest(m))) if m.contains("does not decode")),
            "{r:?}"
        );
        let r = n1
            .request(&ClientRequest::Membership(MembershipChange::Remove { id: 1 }))
            .await;
        assert!(
            matches!(&r, Ok(Response::Error(ApiError::Unauthorized(_)))),
            "{r:?}"
        );
        // It reads only its own node's work and jobs.
        for q in [
            node_work("n2"),
            Query::Job(id.into()),
            Query::Jobs(JobFilter::default()),
            Query::Nodes,
            Query::Shares,
            Query::Objects,
            Query::Digest,
        ] {
            read_refused(n1.read(q.clone(), false).await, &format!("{q:?}"));
        }

        // The job is untouched; n2 itself may read it and report on it.
        let j = job(&admin, id).await;
        assert_eq!(j.attempts.len(), 1);
        assert!(j.attempts[0].end.is_none(), "{j:?}");
        assert_ne!(j.status, JobStatus::Cancelled);
        let r = n2.read(Query::Job(id.into()), false).await;
        assert!(matches!(r, Ok(Response::Job(_))), "{r:?}");
        let r = n2.command(progress(Progress::Running)).await;
        assert!(matches!(r, Ok(Ok(_))), "{r:?}");
    });
}
