//! What the in-process tests of the AWS Batch-compatible endpoint share: the HTTP
//! API's router over the controller's test rig (see `tranche-http`'s tests), with the
//! endpoint's routes merged in as the daemon merges them, an `[aws]` catalog like the
//! one `tranche dev` writes, access keys in the state, and requests signed here with
//! SigV4 as botocore signs them. No daemon starts and no port is bound.

#![allow(dead_code)]

#[path = "../../../http/tests/common/mod.rs"]
mod http;

use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::http::{HeaderMap, HeaderValue, Method, Request};
use axum::Router;
use serde_json::{json, Value};
use tranche_aws::sigv4;
use tranche_aws::Endpoint;
use tranche_controller::config::{AwsConfig, InstanceType};
use tranche_model::{AccessKey, KeyRole};
use tranche_state::State;

#[allow(unused_imports)]
pub use http::{send, Harness, Reply};

pub const REGION: &str = "us-west-2";
pub const ACCOUNT: &str = "123456789012";
pub const IMAGE: &str = "123456789012.dkr.ecr.us-west-2.amazonaws.com/tranche-train:latest";
/// AWS's PyTorch training images, in the catalog as a pattern.
pub const PYTORCH: &str = "763104351884.dkr.ecr.*.amazonaws.com/pytorch-training:*";
/// The headers every request here signs (botocore signs these and more).
pub const SIGNED: [&str; 3] = ["content-type", "host", "x-amz-date"];
const HOST: &str = "c1.tranche.test:8443";

/// The cluster's key secret in these tests.
pub const MASTER: &[u8] = b"0123456789abcdef0123456789abcdef-test-key-secret";

/// The endpoint over a test rig, with access keys for an admin and two users.
pub struct Aws {
    pub h: Harness,
    pub app: Router,
    pub admin: String,
    pub alice: String,
    pub bob: String,
}

/// The `[aws]` settings of these tests: A10G instances of 1 and 4 GPUs, H100s of 8,
/// one training image, and AWS's PyTorch training images of every region and tag
/// ([`PYTORCH`]) as one local image.
pub fn config() -> AwsConfig {
    let mut cfg = AwsConfig {
        region: REGION.into(),
        account_id: ACCOUNT.into(),
        ..AwsConfig::default()
    };
    for (name, unit, gpus) in [
        ("ml.g5.xlarge", "a10g", 1),
        ("ml.g5.12xlarge", "a10g", 4),
        ("ml.p5.48xlarge", "h100", 8),
    ] {
        cfg.instance_types.insert(
            name.into(),
            InstanceType {
                unit: unit.into(),
                gpus,
            },
        );
    }
    cfg.images
        .insert(IMAGE.into(), "/images/tranche-train".into());
    cfg.images.insert(PYTORCH.into(), "/images/pytorch".into());
    cfg
}

fn key(state: &mut State, user: &str, role: KeyRole) -> String {
    let id = tranche_tls::keys::new_key_id();
    state.keys.insert(
        id.clone(),
        AccessKey {
            id: id.clone(),
            user: user.into(),
            role,
            created_at: 1,
            revoked_at: None,
            issuer_serial: None,
            expires_at: None,
        },
    );
    id
}

impl Aws {
    /// The endpoint over `state` plus keys of `admin` (admin), `alice` and `bob`
    /// (users). Call within a tokio runtime.
    pub fn new(mut state: State) -> Aws {
        let admin = key(&mut state, "admin", KeyRole::Admin);
        let alice = key(&mut state, "alice", KeyRole::User);
        let bob = key(&mut state, "bob", KeyRole::User);
        let h = Harness::new(state);
        let ep = Endpoint::new(config(), MASTER.to_vec(), Duration::from_secs(5));
        let app = h.router(tranche_aws::router(Some(Arc::new(ep))));
        Aws {
            h,
            app,
            admin,
            alice,
            bob,
        }
    }

    /// The secret of access key `id`, as `tranche keys issue` prints it.
    pub fn secret(&self, id: &str) -> String {
        tranche_tls::keys::derive_secret(MASTER, id)
    }

    /// Operation `op` (`CreateJobQueue`, …) with `body`, signed by key `id`.
    pub async fn op(&self, id: &str, op: &str, body: Value) -> Reply {
        let path = format!("/v1/{}", op.to_lowercase());
        self.signed(id, Method::POST, &path, body.to_string().into_bytes())
            .await
    }

    /// An AWS JSON 1.1 operation (`POST /`), `target` such as
    /// `SageMaker.DescribeTrainingJob`, with `body`, signed by key `id` for `service`.
    pub async fn target(&self, id: &str, service: &str, target: &str, body: Value) -> Reply {
        let req = sign_for(
            service,
            Some(target),
            Method::POST,
            "/",
            body.to_string().into_bytes(),
            id,
            &self.secret(id),
            now_s(),
        );
        self.send(req).await
    }

    /// A request signed by key `id` with its true secret.
    pub async fn signed(&self, id: &str, method: Method, path: &str, body: Vec<u8>) -> Reply {
        let req = sign(method, path, body, id, &self.secret(id), now_s());
        self.send(req).await
    }

    pub async fn send(&self, req: Request<Body>) -> Reply {
        http::send(&self.app, req).await
    }
}

pub fn now_s() -> u64 {
    tranche_controller::mailbox::wall_ms() / 1000
}

/// `method path` with `body`, signed at `at` (seconds since the epoch) by key `id`
/// with `secret`, over [`SIGNED`], as botocore signs for `batch` in [`REGION`].
pub fn sign(
    method: Method,
    path_and_query: &str,
    body: Vec<u8>,
    id: &str,
    secret: &str,
    at: u64,
) -> Request<Body> {
    sign_for(
        sigv4::SERVICE,
        None,
        method,
        path_and_query,
        body,
        id,
        secret,
        at,
    )
}

/// [`sign`] for `service`, with the `X-Amz-Target` header `target` where one is given
/// (signed too, as botocore signs it).
#[allow(clippy::too_many_arguments)]
pub fn sign_for(
    service: &str,
    target: Option<&str>,
    method: Method,
    path_and_query: &str,
    body: Vec<u8>,
    id: &str,
    secret: &str,
    at: u64,
) -> Request<Body> {
    let mut headers = HeaderMap::new();
    headers.insert("host", HeaderValue::from_static(HOST));
    headers.insert("content-type", HeaderValue::from_static("application/json"));
    headers.insert(
        "x-amz-date",
        HeaderValue::from_str(&sigv4::format_amz_date(at)).unwrap(),
    );
    let mut signed = SIGNED.to_vec();
    if let Some(t) = target {
        headers.insert("x-amz-target", HeaderValue::from_str(t).unwrap());
        signed.push("x-amz-target");
    }
    let (path, query) = path_and_query
        .split_once('?')
        .unwrap_or((path_and_query, ""));
    let auth = sigv4::authorization_for(
        &sigv4::SignedRequest {
            method: method.as_str(),
            path,
            query,
            headers: &headers,
            body: &body,
        },
        id,
        secret,
        REGION,
        service,
        &signed,
    );
    headers.insert("authorization", HeaderValue::from_str(&auth).unwrap());
    let mut req = Request::builder()
        .method(method)
        .uri(path_and_query)
        .body(Body::from(body))
        .unwrap();
    *req.headers_mut() = headers;
    req
}

/// What an AWS error answer says: its HTTP status, `__type` (which must be the
/// `x-amzn-ErrorType` header too) and `message`.
pub fn aws_error(r: &Reply) -> (u16, String, String) {
    let v = r.json();
    let ty = v["__type"].as_str().unwrap_or_default().to_string();
    assert_eq!(
        r.headers
            .get("x-amzn-ErrorType")
            .map(|h| h.to_str().unwrap()),
        Some(ty.as_str()),
        "the error type is in the header and the body: {}",
        r.text()
    );
    assert!(r.headers.contains_key("x-amzn-RequestId"), "{}", r.text());
    (
        r.status.as_u16(),
        ty,
        v["message"].as_str().unwrap_or_default().to_string(),
    )
}

/// The answer is a `ClientException` (400) whose message has `contains`.
#[track_caller]
pub fn client_error(r: &Reply, contains: &str) {
    let (status, ty, message) = aws_error(r);
    assert_eq!(
        (status, ty.as_str()),
        (400, "ClientException"),
        "{}",
        r.text()
    );
    assert!(message.contains(contains), "`{contains}` not in: {message}");
}

/// The answer is a 200 with a request id; its JSON body.
#[track_caller]
pub fn ok(r: &Reply) -> Value {
    assert_eq!(r.status.as_u16(), 200, "{}", r.text());
    assert!(r.headers.contains_key("x-amzn-RequestId"));
    r.json()
}

/// A CreateTrainingJob request for SageMaker, as `serviceRequestPayload`.
pub fn payload(name: &str, itype: &str, count: u32) -> String {
    serde_json::json!({
        "TrainingJobName": name,
        "AlgorithmSpecification": {"TrainingImage": IMAGE, "TrainingInputMode": "File"},
        "HyperParameters": {"lr": "0.1"},
        "ResourceConfig": {"InstanceType": itype, "InstanceCount": count, "VolumeSizeInGB": 30},
        "RoleArn": "arn:aws:iam::123456789012:role/SageMakerRole",
        "StoppingCondition": {"MaxRuntimeInSeconds": 600},
        "OutputDataConfig": {"S3OutputPath": "s3://out/x"},
        "Environment": {"SECRET": "s3cr3t"},
    })
    .to_string()
}

impl Aws {
    /// Applies `cmd` to the state now, as the node task applies a committed entry.
    pub fn apply(&self, cmd: tranche_state::Command) {
        self.apply_after(cmd, 0)
    }

    /// Applies `cmd` to the state `ms` milliseconds from now.
    pub fn apply_after(&self, cmd: tranche_state::Command, ms: u64) {
        let mut sh = self.h.rig.shared.write().unwrap();
        let now = tranche_controller::mailbox::wall_ms().max(sh.last_now) + ms;
        sh.state.apply(&cmd, now).expect("the command applies");
        sh.last_now = now;
    }

    /// Node `name` with `gpus` healthy A10Gs, registered.
    pub fn node(&self, name: &str, gpus: u32) {
        let inv = tranche_model::NodeInventory {
            name: name.into(),
            address: "127.0.0.1".into(),
            labels: Default::default(),
            gpus: (0..gpus)
                .map(|i| tranche_model::Gpu {
                    index: tranche_model::GpuIndex(i),
                    uuid: format!("GPU-{name}-{i}"),
                    unit: "a10g".into(),
                    memory_mb: 1,
                    healthy: true,
                })
                .collect(),
            cpus: 4,
            memory_mb: 1024,
        };
        self.apply(tranche_state::Command::RegisterNode(inv));
    }

    /// Attempt `attempt` of service job `id` (its `jobId`) reports `event`.
    pub fn report(&self, id: &str, attempt: u32, event: tranche_model::Progress) {
        self.report_after(id, attempt, event, 0)
    }

    /// [`Aws::report`], `ms` milliseconds from now.
    pub fn report_after(&self, id: &str, attempt: u32, event: tranche_model::Progress, ms: u64) {
        let job = tranche_model::JobId(id.parse().unwrap());
        let cmd = tranche_state::Command::JobProgress {
            job,
            attempt,
            event,
        };
        self.apply_after(cmd, ms);
    }
}

/// A queue `jq` with a LEND share `qs` of 3 ml.g5.xlarge, made by the admin.
pub async fn setup() -> Aws {
    let aws = Aws::new(State::new());
    let key = aws.admin.clone();
    let sp = ok(&aws
        .op(
            &key,
            "CreateSchedulingPolicy",
            json!({"name": "sp", "quotaSharePolicy": {"idleResourceAssignmentStrategy": "FIFO"}}),
        )
        .await)["arn"]
        .clone();
    ok(&aws
        .op(&key, "CreateServiceEnvironment", json!({
            "serviceEnvironmentName": "se", "serviceEnvironmentType": "SAGEMAKER_TRAINING",
            "state": "ENABLED", "capacityLimits": [{"maxCapacity": 3, "capacityUnit": "ml.g5.xlarge"}],
        }))
        .await);
    ok(&aws
        .op(&key, "CreateJobQueue", json!({
            "jobQueueName": "jq", "jobQueueType": "SAGEMAKER_TRAINING", "state": "ENABLED",
            "priority": 1, "serviceEnvironmentOrder": [{"order": 1, "serviceEnvironment": "se"}],
            "schedulingPolicyArn": sp,
        }))
        .await);
    ok(&aws
        .op(
            &key,
            "CreateQuotaShare",
            json!({
                "quotaShareName": "qs", "jobQueue": "jq",
                "capacityLimits": [{"capacityUnit": "ml.g5.xlarge", "maxCapacity": 3}],
                "resourceSharingConfiguration": {"strategy": "LEND"},
                "preemptionConfiguration": {"inSharePreemption": "DISABLED"}, "state": "ENABLED",
            }),
        )
        .await);
    aws
}

pub fn submit(name: &str) -> Value {
    json!({
        "jobName": name, "jobQueue": "jq", "serviceJobType": "SAGEMAKER_TRAINING",
        "quotaShareName": "qs", "serviceRequestPayload": payload(name, "ml.g5.xlarge", 1),
    })
}
