//! A hostile tenant against a real 3-controller cluster on 127.0.0.1: user `bob` tries
//! to read user `alice`'s secrets over every surface (QUIC, HTTPS, the AWS
//! Batch-compatible endpoint signed with his own access key), to submit a SageMaker
//! part over QUIC, to terminate alice's jobs through the AWS endpoint, to have a
//! browser send a change for him (CSRF), and to crash the SigV4 check; each is refused,
//! while alice and an operator still see everything of alice's jobs.

use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use hyper::header::{HeaderMap, HeaderName, HeaderValue};
use hyper_util::rt::TokioIo;
use serde_json::{json, Value};
use tranche_aws::sigv4::{authorization, format_amz_date, SignedRequest};
use tranche_client::{Client, ClientError};
use tranche_local::rig::{self, rt, serial};
use tranche_local::{demo, LocalCluster};
use tranche_model::{JobId, JobSpec, JobStatus, KeyRole, SageMakerJob};
use tranche_proto::{ApiError, ClientCommand, Query, Refusal};
use tranche_tls::{Role, TlsFiles};

/// The binary these tests run.
const TRANCHED: &str = env!("CARGO_BIN_EXE_tranched");

const SECRET: &str = "hf_SECRET_of_alice";
const REGION: &str = "us-west-2";
const TLS_NAME: &str = "controller.tranche";

/// One answer over HTTPS.
struct Reply {
    status: u16,
    headers: HeaderMap,
    body: Vec<u8>,
}

impl Reply {
    fn json(&self) -> Value {
        serde_json::from_slice(&self.body)
            .unwrap_or_else(|e| panic!("not JSON ({e}): {}", self.text()))
    }
    fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }
}

/// A minimal HTTPS client: one connection per request, the cluster CA as the only root.
struct Https {
    ca: std::path::PathBuf,
    addr: String,
}

impl Https {
    fn tls(&self, cert: Option<&TlsFiles>) -> rustls::ClientConfig {
        rig::https_client_config(&self.ca, cert)
    }

    /// Sends `method path` with exactly `headers` (and `host`) and `body`.
    async fn send(
        &self,
        cert: Option<&TlsFiles>,
        method: &str,
        path: &str,
        headers: &HeaderMap,
        body: &[u8],
    ) -> Reply {
        let tls = rig::https_connect(&self.addr, Arc::new(self.tls(cert)))
            .await
            .unwrap();
        let (mut send, conn) = hyper::client::conn::http1::handshake(TokioIo::new(tls))
            .await
            .unwrap();
        tokio::spawn(conn);
        let mut req = hyper::Request::builder().method(method).uri(path);
        *req.headers_mut().unwrap() = headers.clone();
        req.headers_mut()
            .unwrap()
            .insert("host", HeaderValue::from_static(TLS_NAME));
        let req = req.body(Full::new(Bytes::from(body.to_vec()))).unwrap();
        let resp = send.send_request(req).await.unwrap();
        let status = resp.status().as_u16();
        let headers = resp.headers().clone();
        let body = resp
            .into_body()
            .collect()
            .await
            .unwrap()
            .to_bytes()
            .to_vec();
        Reply {
            status,
            headers,
            body,
        }
    }

    /// A request with a client certificate, JSON when it has a body.
    async fn call(&self, cert: &TlsFiles, method: &str, path: &str, body: Option<Value>) -> Reply {
        let mut h = HeaderMap::new();
        if body.is_some() {
            h.insert("content-type", HeaderValue::from_static("application/json"));
        }
        let body = body.map(|b| b.to_string().into_bytes()).unwrap_or_default();
        self.send(Some(cert), method, path, &h, &body).await
    }

    /// An AWS operation signed with `key` as botocore signs it; `date` replaces the
    /// `X-Amz-Date` header after signing when given (as raw bytes).
    async fn aws(
        &self,
        key: &(String, String),
        op: &str,
        body: Value,
        date: Option<&[u8]>,
    ) -> Reply {
        self.aws_at(key, &format!("/v1/{op}"), &format!("/v1/{op}"), body, date)
            .await
    }

    /// As [`Https::aws`], signed for path `signed` and sent to path `sent`.
    async fn aws_at(
        &self,
        key: &(String, String),
        signed: &str,
        sent: &str,
        body: Value,
        date: Option<&[u8]>,
    ) -> Reply {
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .as_secs();
        let body = body.to_string().into_bytes();
        let mut h = HeaderMap::new();
        h.insert("host", HeaderValue::from_static(TLS_NAME));
        h.insert("content-type", HeaderValue::from_static("application/json"));
        h.insert(
            "x-amz-date",
            HeaderValue::from_str(&format_amz_date(now)).unwrap(),
        );
        let req = SignedRequest {
            method: "POST",
            path: signed,
            query: "",
            headers: &h,
            body: &body,
        };
        let auth = authorization(&req, &key.0, &key.1, REGION, &["host", "x-amz-date"]);
        h.insert("authorization", HeaderValue::from_str(&auth).unwrap());
        if let Some(d) = date {
            h.insert(
                HeaderName::from_static("x-amz-date"),
                HeaderValue::from_bytes(d).unwrap(),
            );
        }
        self.send(None, "POST", sent, &h, &body).await
    }
}

/// The cluster: 3 controllers with HTTPS and the AWS endpoint (an instance type and
/// an image in its catalog), the demo policy applied.
struct Rig {
    c: LocalCluster,
    https: Https,
}

fn start(dir: &std::path::Path) -> Rig {
    let secret = dir.join("key-secret");
    tranche_tls::keys::write_key_secret_file(&secret).unwrap();
    let extra = format!(
        "[aws]\nkey_secret_file = \"{}\"\nregion = \"{REGION}\"\n\
         [aws.instance_types]\n\"ml.p5.48xlarge\" = {{ unit = \"h100\", gpus = 8 }}\n\
         [aws.images]\n\"trainer:1\" = \"/images/trainer\"\n",
        secret.display()
    );
    let c = rig::start(dir, 3, rig::options(TRANCHED, &extra));
    let https = Https {
        ca: c.certs.join("ca.pem"),
        addr: c.controllers[0].http_addr.clone().expect("http_addr"),
    };
    Rig { c, https }
}

async fn ready(r: &mut Rig) {
    let (admin, _) = rig::leader(&mut r.c, Duration::from_secs(20)).await;
    rig::apply(&admin, demo::objects()).await;
}

/// An access key of `user` (id, secret), issued by the user itself.
async fn access_key(client: &Client, user: &str) -> (String, String) {
    let (key, secret) = rig::access_key(client, user, KeyRole::User).await;
    (key.id, secret)
}

/// Alice's job over QUIC: held (no node runs it), with a secret in its env, command,
/// working directory and tags.
fn alice_spec() -> JobSpec {
    let mut s = JobSpec::new("train", "q", "lend", "alice", "h100", 1, 1);
    s.command = vec!["python".into(), format!("--token={SECRET}")];
    s.env.insert("HF_TOKEN".into(), SECRET.into());
    s.cwd = Some(format!("/home/alice/{SECRET}"));
    s.tags.insert("key".into(), SECRET.into());
    s.hold = true;
    s
}

/// A CreateTrainingJob request with a secret in its environment.
fn training_payload() -> String {
    json!({
        "TrainingJobName": "alice-train",
        "AlgorithmSpecification": {"TrainingImage": "trainer:1", "TrainingInputMode": "File",
                                   "ContainerEntrypoint": ["python", "train.py"]},
        "ResourceConfig": {"InstanceType": "ml.p5.48xlarge", "InstanceCount": 1, "VolumeSizeInGB": 1},
        "Environment": {"WANDB_API_KEY": SECRET},
        "HyperParameters": {"lr": "0.1"},
        "RoleArn": "arn:aws:iam::123456789012:role/x",
        "OutputDataConfig": {"S3OutputPath": "s3://b/o"},
        "StoppingCondition": {"MaxRuntimeInSeconds": 3600},
    })
    .to_string()
}

/// The tenants: users alice and bob and operator ops, their certificates and QUIC
/// clients, and alice's job `job` (submitted over QUIC, held).
struct Tenants {
    alice: Client,
    bob: Client,
    ops: Client,
    alice_files: TlsFiles,
    bob_files: TlsFiles,
    ops_files: TlsFiles,
    job: JobId,
}

async fn tenants(r: &mut Rig) -> Tenants {
    ready(r).await;
    let t = Tenants {
        alice: r.c.client(Role::User, "alice").unwrap(),
        bob: r.c.client(Role::User, "bob").unwrap(),
        ops: r.c.client(Role::Operator, "ops").unwrap(),
        alice_files: r.c.issue(Role::User, "alice").unwrap(),
        bob_files: r.c.issue(Role::User, "bob").unwrap(),
        ops_files: r.c.issue(Role::Operator, "ops").unwrap(),
        job: JobId(0),
    };
    let (job, _) = t.alice.submit(alice_spec()).await.unwrap();
    Tenants { job, ..t }
}

/// Runs `test` against a fresh cluster, one cluster test at a time.
fn with_cluster(test: impl AsyncFnOnce(&mut Rig, Tenants)) {
    let _serial = serial();
    let dir = tempfile::tempdir().unwrap();
    let mut r = start(dir.path());
    rt().block_on(async {
        let t = tenants(&mut r).await;
        test(&mut r, t).await
    });
}

/// Alice's SageMaker job, submitted through the AWS endpoint with her key: its id.
async fn alice_service_job(r: &Rig, alice_key: &(String, String)) -> String {
    let submitted = r
        .https
        .aws(
            alice_key,
            "submitservicejob",
            json!({"jobName": "alice-train", "jobQueue": "q", "serviceJobType": "SAGEMAKER_TRAINING",
                   "quotaShareName": "lend", "serviceRequestPayload": training_payload()}),
            None,
        )
        .await;
    assert_eq!(submitted.status, 200, "{}", submitted.text());
    submitted.json()["jobId"].as_str().unwrap().to_string()
}

#[test]
fn h3_bob_reads_only_the_summary_of_alices_job_over_quic() {
    with_cluster(async |_r, t| {
        let seen = rig::job(&t.bob, t.job).await;
        assert!(seen.spec.is_redacted(), "{seen:?}");
        assert!(
            !format!("{seen:?}").contains(SECRET),
            "bob read a secret: {seen:?}"
        );
        assert_eq!((seen.id, seen.spec.user.as_str()), (t.job, "alice"));
        assert_eq!(seen.status, JobStatus::Pending);
        assert_eq!(seen.spec.request.gpus_per_node, 1);
        for (who, client) in [("alice", &t.alice), ("ops", &t.ops)] {
            let j = rig::job(client, t.job).await;
            assert_eq!(j.spec.env["HF_TOKEN"], SECRET, "{who}");
            assert_eq!(j.spec.command[1], format!("--token={SECRET}"), "{who}");
        }
        // The explanation and the list carry no spec either.
        let explained = t
            .bob
            .read(Query::Explain(t.job.into()), false)
            .await
            .unwrap();
        assert!(!format!("{explained:?}").contains(SECRET));
        let list = t
            .bob
            .read(Query::Jobs(Default::default()), false)
            .await
            .unwrap();
        assert!(!format!("{list:?}").contains(SECRET));
    });
}

#[test]
fn h3_bob_reads_only_the_summary_of_alices_job_over_https() {
    with_cluster(async |r, t| {
        let path = format!("/api/v1/jobs/{}", t.job.0);
        let b = r.https.call(&t.bob_files, "GET", &path, None).await;
        assert_eq!(b.status, 200, "{}", b.text());
        assert!(
            !b.text().contains(SECRET),
            "bob read a secret: {}",
            b.text()
        );
        let v = b.json();
        assert_eq!(v["spec"]["env"], json!({}));
        assert_eq!(v["spec"]["user"], json!("alice"));
        assert!(
            v["hidden"].as_array().unwrap().contains(&json!("env")),
            "{v}"
        );
        for f in [&t.alice_files, &t.ops_files] {
            let a = r.https.call(f, "GET", &path, None).await;
            assert_eq!(a.json()["spec"]["env"]["HF_TOKEN"], json!(SECRET));
            assert_eq!(a.json()["hidden"], json!([]));
        }
        // The log relay refuses bob by the same rule.
        let logs = r
            .https
            .call(&t.bob_files, "GET", &format!("{path}/logs"), None)
            .await;
        assert_eq!(logs.status, 403, "{}", logs.text());
        let list = r
            .https
            .call(&t.bob_files, "GET", "/api/v1/jobs?limit=1", None)
            .await;
        assert_eq!(list.status, 200, "{}", list.text());
        assert!(!list.text().contains(SECRET));
    });
}

#[test]
fn h3_bob_reads_no_payload_of_alices_service_job_over_aws() {
    with_cluster(async |r, t| {
        let alice_key = access_key(&t.alice, "alice").await;
        let bob_key = access_key(&t.bob, "bob").await;
        let id = alice_service_job(r, &alice_key).await;
        let describe = json!({"jobId": id});
        let d = r
            .https
            .aws(&bob_key, "describeservicejob", describe.clone(), None)
            .await;
        assert_eq!(d.status, 200, "{}", d.text());
        assert!(
            !d.text().contains(SECRET),
            "bob read a secret: {}",
            d.text()
        );
        assert!(
            d.json().get("serviceRequestPayload").is_none(),
            "{}",
            d.text()
        );
        assert_eq!(d.json()["jobName"], json!("alice-train"));
        let d = r
            .https
            .aws(&alice_key, "describeservicejob", describe, None)
            .await;
        assert!(d.json()["serviceRequestPayload"]
            .as_str()
            .unwrap()
            .contains(SECRET));
        for status in ["RUNNABLE", "PENDING"] {
            let l = r
                .https
                .aws(
                    &bob_key,
                    "listservicejobs",
                    json!({"jobStatus": status}),
                    None,
                )
                .await;
            assert_eq!(l.status, 200, "{}", l.text());
            assert!(!l.text().contains(SECRET));
        }
    });
}

#[test]
fn m2_a_quic_submit_with_a_sagemaker_part_is_refused() {
    with_cluster(async |_r, t| {
        let mut sm = alice_spec();
        sm.sagemaker = Some(Box::new(SageMakerJob {
            training_job_name: "x".into(),
            hyperparameters: Default::default(),
            channels: [("root".to_string(), "/".to_string())].into(),
            payload: "{}".into(),
            instance_type: "ml.p5.48xlarge".into(),
        }));
        match t.alice.submit(sm).await {
            Err(ClientError::Api(ApiError::Rejected(Refusal::Invalid(v)))) => {
                assert_eq!(v.field, "sagemaker", "{v}");
                assert!(v.rule.contains("[aws.file_systems]"), "{v}");
            }
            other => panic!("a QUIC submit with a SageMaker part: {other:?}"),
        }
    });
}

#[test]
fn l11_bob_cannot_terminate_alices_service_jobs_and_ids_are_no_oracle() {
    with_cluster(async |r, t| {
        let alice_key = access_key(&t.alice, "alice").await;
        let bob_key = access_key(&t.bob, "bob").await;
        let sm_id = alice_service_job(r, &alice_key).await;
        // Alice's QUIC job, ended.
        let cancel = ClientCommand::Cancel {
            job: t.job.into(),
            reason: "done".into(),
        };
        assert!(t.alice.command(cancel).await.unwrap().is_ok());
        for (job, what) in [
            (t.job.0.to_string(), "cancelled"),
            (sm_id.clone(), "waiting"),
        ] {
            let r = r
                .https
                .aws(
                    &bob_key,
                    "terminateservicejob",
                    json!({"jobId": job, "reason": "mine"}),
                    None,
                )
                .await;
            assert_eq!(r.status, 400, "{what}: {}", r.text());
            assert!(
                r.text().contains("may not terminate it"),
                "{what}: {}",
                r.text()
            );
        }
        let terminate = |job: &str| json!({"jobId": job, "reason": "x"});
        let unknown = r
            .https
            .aws(&bob_key, "terminateservicejob", terminate("999999"), None)
            .await;
        let other = r
            .https
            .aws(&bob_key, "terminateservicejob", terminate(&sm_id), None)
            .await;
        let strip = |t: &Reply| {
            t.json()["message"]
                .to_string()
                .replace(&sm_id, "ID")
                .replace("999999", "ID")
        };
        assert_eq!(
            (unknown.status, strip(&unknown)),
            (other.status, strip(&other)),
            "an unknown job and another's are answered alike"
        );
        let many = r
            .https
            .aws(
                &bob_key,
                "terminateservicejobs",
                json!({"jobs": [sm_id, "999999"], "reason": "x"}),
                None,
            )
            .await;
        assert_eq!(many.status, 200, "{}", many.text());
        assert_eq!(many.json()["successful"], json!([]), "{}", many.text());
        let sm_job = rig::job(&t.alice, JobId(sm_id.parse().unwrap())).await;
        assert!(!sm_job.status.is_terminal(), "bob's terminate went through");
        // Alice terminates her own.
        let mine = r
            .https
            .aws(&alice_key, "terminateservicejob", terminate(&sm_id), None)
            .await;
        assert_eq!(mine.status, 200, "{}", mine.text());
    });
}

#[test]
fn l1_a_change_a_browser_could_send_across_sites_is_refused() {
    with_cluster(async |r, t| {
        // Alice's job is held at submit; she releases it, then another site's page
        // tries to hold it again through her browser (her client certificate).
        let release = ClientCommand::Release { job: t.job.into() };
        assert!(t.alice.command(release).await.unwrap().is_ok());
        let hold = format!("/api/v1/jobs/{}/hold", t.job.0);
        let none = r
            .https
            .send(Some(&t.alice_files), "POST", &hold, &HeaderMap::new(), b"")
            .await;
        assert_eq!(none.status, 415, "{}", none.text());
        assert!(none.text().contains("Content-Type"), "{}", none.text());
        let mut form = HeaderMap::new();
        form.insert("content-type", HeaderValue::from_static("text/plain"));
        let plain = r
            .https
            .send(Some(&t.alice_files), "POST", &hold, &form, b"")
            .await;
        assert_eq!(plain.status, 415, "{}", plain.text());
        let mut cross = HeaderMap::new();
        cross.insert("content-type", HeaderValue::from_static("application/json"));
        cross.insert("origin", HeaderValue::from_static("https://evil.example"));
        let x = r
            .https
            .send(Some(&t.alice_files), "POST", &hold, &cross, b"")
            .await;
        assert_eq!(x.status, 403, "{}", x.text());
        assert!(
            !rig::job(&t.alice, t.job).await.held,
            "a refused hold went through"
        );
        // The same change as the dashboard sends it is taken, and marked.
        let mut same = HeaderMap::new();
        same.insert("content-type", HeaderValue::from_static("application/json"));
        same.insert(
            "origin",
            HeaderValue::from_static("https://controller.tranche"),
        );
        let ok = r
            .https
            .send(Some(&t.alice_files), "POST", &hold, &same, b"")
            .await;
        assert_eq!(ok.status, 200, "{}", ok.text());
        assert!(rig::job(&t.alice, t.job).await.held);
        assert_eq!(ok.headers["x-content-type-options"], "nosniff");
        assert!(ok.headers["content-security-policy"]
            .to_str()
            .unwrap()
            .contains("default-src 'none'"));
    });
}

#[test]
fn l2_a_multibyte_amz_date_is_a_signature_error_not_a_500() {
    with_cluster(async |r, t| {
        let bob_key = access_key(&t.bob, "bob").await;
        let bad = r
            .https
            .aws(
                &bob_key,
                "listservicejobs",
                json!({}),
                Some("202é001T000000Z".as_bytes()),
            )
            .await;
        // A malformed signature header: 400, as AWS answers it.
        assert_eq!(bad.status, 400, "{}", bad.text());
        assert!(
            bad.text().contains("IncompleteSignatureException"),
            "{}",
            bad.text()
        );
    });
}

#[test]
fn l3_a_signed_request_sent_to_a_path_with_dot_segments_is_refused() {
    with_cluster(async |r, t| {
        let alice_key = access_key(&t.alice, "alice").await;
        let id = alice_service_job(r, &alice_key).await;
        // Signed for TerminateServiceJob; sent to the tags route with the same
        // canonical path.
        let moved = r
            .https
            .aws_at(
                &alice_key,
                "/v1/terminateservicejob",
                "/v1/tags/../terminateservicejob",
                json!({"jobId": id, "reason": "x"}),
                None,
            )
            .await;
        assert_eq!(moved.status, 403, "{}", moved.text());
        assert!(moved.text().contains("segments"), "{}", moved.text());
    });
}
