//! The AWS Batch-compatible endpoint: AWS Batch's quota-management and service-job
//! operations (rest-json, `POST /v1/<operation>`, tags under `/v1/tags/<ARN>`), signed
//! with SigV4 by access keys that `tranche keys issue` makes, on the controllers'
//! HTTPS listener beside `/api/v1/`; and, to watch the training jobs those jobs run,
//! SageMaker's `DescribeTrainingJob` and CloudWatch Logs' `DescribeLogStreams` and
//! `GetLogEvents` (AWS JSON 1.1, `POST /` with `X-Amz-Target`); and the S3 object calls
//! the SageMaker SDK makes, for requests signed for `s3` ([`s3`], where `[aws] s3_dir`
//! is set).
//!
//! A request is verified ([`sigv4`]) with the secret derived from its access key's id
//! ([`tranche_tls::keys`]); it then acts as the key's identity through the service layer, so the
//! same authorization as the CLI's and the native API's, and writes are forwarded to
//! the leader the same way. Reads wait for a read barrier first, so a client reads its
//! own writes whichever controller it talks to.
//!
//! The crate may depend on `tranche-controller` (the service layer and its shared
//! state), `tranche-http` (its [`Api`], [`MAX_BODY`] and the port it serves on),
//! `tranche-proto`, `tranche-tls` and axum. `tranche-http` never depends on it: the
//! composition root merges [`router`] into the HTTP API's router. It never touches the
//! Raft node or the stored state except through the service layer and its reads.

pub mod arn;
pub mod capacity;
mod ops;
pub mod s3;
pub mod sigv4;
pub mod training;
pub mod wire;

use std::sync::{Arc, RwLockReadGuard};
use std::time::Duration;

use axum::extract::{Path, Request, State as AxState};
use axum::http::Method;
use axum::response::Response;
use axum::routing::{any, post};
use axum::{Extension, Router};
use tranche_model::Millis;
use tranche_proto::{ClientCommand, ClientRequest, Outcome, Response as Answer};
use tranche_state::State;
use tranche_tls::{Identity, Role};

use tranche_controller::config::AwsConfig;
use tranche_controller::mailbox::{wall_ms, Shared};
use tranche_http::{Api, MAX_BODY};
use wire::{AwsError, AwsResult};

/// The endpoint's settings, read from `[aws]` when the controller starts.
pub struct Endpoint {
    pub cfg: AwsConfig,
    pub arns: arn::Arns,
    pub cap: capacity::Capacity,
    /// The cluster's key secret (see [`tranche_tls::keys`]).
    master: Vec<u8>,
    /// A request's body must arrive within this (`[http] body_timeout_s`).
    pub body_timeout: Duration,
}

impl Endpoint {
    pub fn new(cfg: AwsConfig, master: Vec<u8>, body_timeout: Duration) -> Endpoint {
        Endpoint {
            body_timeout,
            arns: arn::Arns {
                region: cfg.region.clone(),
                account: cfg.account_id.clone(),
            },
            cap: capacity::Capacity {
                types: cfg.instance_types.clone(),
            },
            cfg,
            master,
        }
    }

    fn regions(&self) -> Vec<&str> {
        std::iter::once(self.cfg.region.as_str())
            .chain(self.cfg.extra_regions.iter().map(String::as_str))
            .collect()
    }
}

/// One request's caller and the controller it talks to.
pub(crate) struct Ctx<'a> {
    pub api: &'a Api,
    pub who: Identity,
}

/// The applied state, read after a barrier.
pub(crate) struct StateRead<'a>(RwLockReadGuard<'a, Shared>);

impl std::ops::Deref for StateRead<'_> {
    type Target = State;
    fn deref(&self) -> &State {
        &self.0.state
    }
}

impl Ctx<'_> {
    /// The state as of now: every write acknowledged before this call is in it.
    pub async fn state(&self) -> AwsResult<StateRead<'_>> {
        self.api.service.barrier().await?;
        Ok(StateRead(self.api.shared.read().unwrap()))
    }

    pub fn now(&self) -> Millis {
        wall_ms().max(self.api.shared.read().unwrap().last_now)
    }

    /// A write as the caller: authorized and replicated like any other.
    pub async fn write(&self, command: ClientCommand) -> AwsResult<Outcome> {
        let req = ClientRequest::Write {
            request: None,
            command,
        };
        let origin = tranche_controller::service::Origin::AwsEndpoint;
        match self.api.service.handle_from(&self.who, origin, req).await {
            Answer::Applied(o) => Ok(o),
            Answer::Error(e) => Err(e.into()),
            other => Err(AwsError::server(format!(
                "the controller answered with {} where a committed write was expected; retry",
                other.kind()
            ))),
        }
    }
}

/// The endpoint's routes, to merge into the HTTP API's router (see
/// [`tranche_http::router`]); `ep` is the endpoint where `[aws]` sets one up, and
/// without it every request is answered that the endpoint is off.
pub fn router(ep: Option<Arc<Endpoint>>) -> Router<Arc<Api>> {
    Router::new()
        .route("/v1/tags/{*arn}", any(tags))
        .route("/v1/{op}", post(operation))
        .route("/", post(json_target))
        .layer(Extension(ep))
}

/// The endpoint as the handlers receive it: `None` where `[aws]` does not set it up.
type Configured = Extension<Option<Arc<Endpoint>>>;

/// The request as [`sigv4::verify`] reads it.
fn signed<'a>(parts: &'a axum::http::request::Parts, body: &'a [u8]) -> sigv4::SignedRequest<'a> {
    sigv4::SignedRequest {
        method: parts.method.as_str(),
        path: parts.uri.path(),
        query: parts.uri.query().unwrap_or(""),
        headers: &parts.headers,
        body,
    }
}

/// Why access key `id` may not sign requests now (`None`: it may): unknown or
/// revoked, past its `expires_at`, or issued by a certificate the current revocation
/// list names. The error says which, in AWS's shape.
fn key_refusal(
    certs: &tranche_tls::CertVerifier,
    state: &State,
    id: &str,
    now: Millis,
) -> Option<AwsError> {
    let unknown = || {
        AwsError::auth(
            "UnrecognizedClientException",
            "The security token included in the request is invalid.",
        )
    };
    let Some(k) = state.keys.get(id) else {
        return Some(unknown());
    };
    if k.revoked_at.is_some() {
        return Some(unknown());
    }
    if let Some(t) = k.expires_at.filter(|t| *t <= now) {
        return Some(AwsError::auth(
            "ExpiredTokenException",
            format!(
                "The security token included in the request is expired: access key {id} \
                 expired at {t} (ms since the epoch); issue a new one with `tranche keys issue`."
            ),
        ));
    }
    if let Some(serial) = k
        .issuer_serial
        .as_deref()
        .filter(|s| certs.revokes_serial(s))
    {
        return Some(AwsError::auth(
            "UnrecognizedClientException",
            format!(
                "The security token included in the request is invalid: access key {id} was \
                 issued by the certificate of serial {serial}, which is revoked."
            ),
        ));
    }
    None
}

/// Verifies the signature: the caller, or the refusal.
///
/// Everything the headers alone decide is checked before a byte of the body is read
/// (the `Authorization` header's form, the credential's scope, region and date,
/// `X-Amz-Date` within 15 minutes, and that the access key exists and is live: not
/// revoked, not expired, its issuing certificate not revoked), so a
/// client without a live key cannot make the controller hold a body open. The body
/// must then arrive within `[http] body_timeout_s`, and the signature over it is
/// checked.
async fn authenticate(
    api: &Api,
    ep: Option<Arc<Endpoint>>,
    req: Request,
    service: &str,
) -> AwsResult<(Arc<Endpoint>, Identity, axum::http::request::Parts, Vec<u8>)> {
    let ep = ep.ok_or_else(|| {
        AwsError::client(
            "this cluster's AWS Batch-compatible endpoint is off: its controllers' config has no [aws] key_secret_file",
        )
    })?;
    let (parts, body) = req.into_parts();
    let now_s = wall_ms() / 1000;
    let regions = ep.regions();
    {
        // The checks up to the key's secret: a live key here stops the check (the
        // signature is over the body, read next) without deriving anything.
        let sh = api.shared.read().unwrap();
        let refusal = std::cell::RefCell::new(None);
        let pre = sigv4::verify_service(&signed(&parts, &[]), service, &regions, now_s, |id| {
            *refusal.borrow_mut() = Some(key_refusal(&api.certs, &sh.state, id, wall_ms()));
            None
        });
        match (pre, refusal.into_inner()) {
            (Err(sigv4::SigError::UnknownKey), Some(None)) => {}
            (Err(sigv4::SigError::UnknownKey), Some(Some(e))) => return Err(e),
            (Err(e), _) => return Err(AwsError::signature(&e)),
            (Ok(_), _) => unreachable!("no secret was given"),
        }
    }
    let timeout = ep.body_timeout;
    let bytes = match tokio::time::timeout(timeout, axum::body::to_bytes(body, MAX_BODY)).await {
        Ok(Ok(b)) => b.to_vec(),
        Ok(Err(_)) => {
            return Err(AwsError::client(format!(
                "the request body is larger than {MAX_BODY} bytes"
            )))
        }
        Err(_) => {
            return Err(AwsError {
                status: axum::http::StatusCode::REQUEST_TIMEOUT,
                code: "ClientException",
                message: format!(
                    "the request body did not arrive within {} s (the limit is \
                     http.body_timeout_s = {})",
                    timeout.as_secs(),
                    timeout.as_secs()
                ),
            })
        }
    };
    let key_id = {
        let sh = api.shared.read().unwrap();
        let v = sigv4::verify_service(&signed(&parts, &bytes), service, &regions, now_s, |id| {
            key_refusal(&api.certs, &sh.state, id, wall_ms())
                .is_none()
                .then(|| tranche_tls::keys::derive_secret(&ep.master, id))
        })
        .map_err(|e| AwsError::signature(&e))?;
        v.access_key_id
    };
    let who = {
        let sh = api.shared.read().unwrap();
        let k = sh.state.keys.get(&key_id).ok_or_else(|| {
            AwsError::auth(
                "UnrecognizedClientException",
                "The security token included in the request is invalid.",
            )
        })?;
        Identity {
            role: match k.role {
                tranche_model::KeyRole::User => Role::User,
                tranche_model::KeyRole::Operator => Role::Operator,
                tranche_model::KeyRole::Admin => Role::Admin,
            },
            name: k.user.to_string(),
        }
    };
    Ok((ep, who, parts, bytes))
}

async fn operation(
    AxState(api): AxState<Arc<Api>>,
    Extension(ep): Configured,
    Path(op): Path<String>,
    req: Request,
) -> Response {
    let rid = wire::request_id();
    let answer = async {
        let (ep, who, _, body) = authenticate(&api, ep, req, sigv4::SERVICE).await?;
        let cx = Ctx { api: &api, who };
        let b = &body[..];
        match op.as_str() {
            "createserviceenvironment" => ep.create_service_environment(&cx, b).await,
            "updateserviceenvironment" => ep.update_service_environment(&cx, b).await,
            "describeserviceenvironments" => ep.describe_service_environments(&cx, b).await,
            "deleteserviceenvironment" => ep.delete_service_environment(&cx, b).await,
            "createschedulingpolicy" => ep.create_scheduling_policy(&cx, b).await,
            "updateschedulingpolicy" => ep.update_scheduling_policy(&cx, b).await,
            "describeschedulingpolicies" => ep.describe_scheduling_policies(&cx, b).await,
            "listschedulingpolicies" => ep.list_scheduling_policies(&cx, b).await,
            "deleteschedulingpolicy" => ep.delete_scheduling_policy(&cx, b).await,
            "createjobqueue" => ep.create_job_queue(&cx, b).await,
            "updatejobqueue" => ep.update_job_queue(&cx, b).await,
            "describejobqueues" => ep.describe_job_queues(&cx, b).await,
            "deletejobqueue" => ep.delete_job_queue(&cx, b).await,
            "createquotashare" => ep.create_quota_share(&cx, b).await,
            "updatequotashare" => ep.update_quota_share(&cx, b).await,
            "describequotashare" => ep.describe_quota_share(&cx, b).await,
            "listquotashares" => ep.list_quota_shares(&cx, b).await,
            "deletequotashare" => ep.delete_quota_share(&cx, b).await,
            "submitservicejob" => ep.submit_service_job(&cx, b).await,
            "describeservicejob" => ep.describe_service_job(&cx, b).await,
            "listservicejobs" => ep.list_service_jobs(&cx, b).await,
            "terminateservicejob" => ep.terminate_service_job(&cx, b).await,
            "terminateservicejobs" => ep.terminate_service_jobs(&cx, b).await,
            "updateservicejob" => ep.update_service_job(&cx, b).await,
            "getjobqueuesnapshot" => ep.get_job_queue_snapshot(&cx, b).await,
            other => Err(AwsError::client(format!(
                "operation `{other}` is not supported by this cluster's AWS Batch-compatible endpoint (it serves the quota-management and service-job operations)"
            ))),
        }
    }
    .await;
    match answer {
        Ok(v) => wire::ok(v, &rid),
        Err(e) => wire::error(&e, &rid),
    }
}

/// The SageMaker and CloudWatch Logs operations (AWS JSON 1.1: `POST /` with the
/// operation in `X-Amz-Target`), which botocore sends to `AWS_ENDPOINT_URL_SAGEMAKER`
/// and `AWS_ENDPOINT_URL_CLOUDWATCH_LOGS`: the target's prefix names the service the
/// request must be signed for.
async fn json_target(
    AxState(api): AxState<Arc<Api>>,
    Extension(ep): Configured,
    req: Request,
) -> Response {
    let rid = wire::request_id();
    let target = req
        .headers()
        .get("x-amz-target")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_string();
    let answer = async {
        let (service, op) = match target.split_once('.') {
            Some(("SageMaker", op)) => ("sagemaker", op),
            Some(("Logs_20140328", op)) => ("logs", op),
            _ => {
                return Err(AwsError::json_client(
                    "UnknownOperationException",
                    format!(
                        "X-Amz-Target `{target}` is not an operation of this endpoint: it serves \
                         SageMaker.DescribeTrainingJob, Logs_20140328.DescribeLogStreams and \
                         Logs_20140328.GetLogEvents"
                    ),
                ))
            }
        };
        let (ep, who, _, body) = authenticate(&api, ep, req, service).await?;
        let cx = Ctx { api: &api, who };
        let b = &body[..];
        match (service, op) {
            ("sagemaker", "DescribeTrainingJob") => ep.describe_training_job(&cx, b).await,
            ("logs", "DescribeLogStreams") => ep.describe_log_streams(&cx, b).await,
            ("logs", "GetLogEvents") => ep.get_log_events(&cx, b).await,
            _ => Err(AwsError::json_client(
                "UnknownOperationException",
                format!(
                    "operation `{target}` is not supported by this cluster's endpoint (of {service}, it serves {})",
                    if service == "sagemaker" {
                        "DescribeTrainingJob"
                    } else {
                        "DescribeLogStreams and GetLogEvents"
                    }
                ),
            )),
        }
    }
    .await;
    match answer {
        Ok(v) => wire::ok_json11(v, &rid),
        Err(e) => wire::error(&e, &rid),
    }
}

async fn tags(
    AxState(api): AxState<Arc<Api>>,
    Extension(ep): Configured,
    Path(arn): Path<String>,
    req: Request,
) -> Response {
    let rid = wire::request_id();
    let method = req.method().clone();
    let keys: Vec<String> = req
        .uri()
        .query()
        .map(|q| {
            url_pairs(q)
                .into_iter()
                .filter(|(k, _)| k == "tagKeys")
                .map(|(_, v)| v)
                .collect()
        })
        .unwrap_or_default();
    let answer = async {
        let (ep, who, _, body) = authenticate(&api, ep, req, sigv4::SERVICE).await?;
        let cx = Ctx { api: &api, who };
        match method {
            Method::GET => ep.list_tags(&cx, &arn).await,
            Method::POST => ep.tag(&cx, &arn, &body).await,
            Method::DELETE => ep.untag(&cx, &arn, keys).await,
            m => Err(AwsError::client(format!(
                "{m} is not a method of /v1/tags/"
            ))),
        }
    }
    .await;
    match answer {
        Ok(v) => wire::ok(v, &rid),
        Err(e) => wire::error(&e, &rid),
    }
}

/// `a=1&b=x%20y` → `[("a","1"), ("b","x y")]`.
fn url_pairs(q: &str) -> Vec<(String, String)> {
    q.split('&')
        .filter(|p| !p.is_empty())
        .map(|p| {
            let (k, v) = p.split_once('=').unwrap_or((p, ""));
            (percent_decode(k), percent_decode(v))
        })
        .collect()
}

fn percent_decode(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let hex = (b[i] == b'%' && i + 2 < b.len())
            .then(|| std::str::from_utf8(&b[i + 1..i + 3]).ok())
            .flatten()
            .and_then(|h| u8::from_str_radix(h, 16).ok());
        match (hex, b[i]) {
            (Some(x), _) => {
                out.push(x);
                i += 3;
                continue;
            }
            (None, b'+') => out.push(b' '),
            (None, c) => out.push(c),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use super::key_refusal;
    use tranche_model::{AccessKey, KeyRole};
    use tranche_tls::{revoke, CertVerifier, RevokeTarget, Role, TlsFiles};

    #[test]
    fn m6_an_expired_key_or_one_of_a_revoked_certificate_signs_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        tranche_tls::init_ca(d, "t", false).unwrap();
        let local = vec!["127.0.0.1".to_string()];
        tranche_tls::issue(d, d, Role::Controller, "c1", &local, 30).unwrap();
        let alice = tranche_tls::issue(d, d, Role::User, "alice", &[], 30).unwrap();
        let spare = tranche_tls::issue(d, d, Role::User, "spare", &[], 30).unwrap();
        let crl = revoke(d, &RevokeTarget::Cert(spare.cert)).unwrap().crl;
        let c1 = TlsFiles {
            crl: Some(crl),
            ..TlsFiles::in_dir(d, Role::Controller, "c1")
        };
        let certs = CertVerifier::new(&c1).unwrap();
        let serial = tranche_tls::serial_of_cert(&tranche_tls::load_certs(&alice.cert).unwrap()[0]);
        let now = 1_000_000;
        let mut state = tranche_state::State::new();
        for (id, expires_at) in [("TKLIVE", Some(now + 1)), ("TKEXPIRED", Some(now))] {
            state.keys.insert(
                id.into(),
                AccessKey {
                    id: id.into(),
                    user: "alice".into(),
                    role: KeyRole::User,
                    created_at: 1,
                    revoked_at: None,
                    issuer_serial: serial.clone(),
                    expires_at,
                },
            );
        }
        assert!(key_refusal(&certs, &state, "TKLIVE", now).is_none());
        let e = key_refusal(&certs, &state, "TKEXPIRED", now).expect("an expired key");
        assert_eq!(e.code, "ExpiredTokenException");
        assert!(
            e.message.contains("TKEXPIRED expired at 1000000"),
            "{}",
            e.message
        );
        let e = key_refusal(&certs, &state, "TKNONE", now).expect("an unknown key");
        assert_eq!(e.code, "UnrecognizedClientException");

        revoke(d, &RevokeTarget::Cert(alice.cert)).unwrap();
        std::thread::sleep(tranche_tls::CRL_RECHECK + std::time::Duration::from_millis(200));
        let e = key_refusal(&certs, &state, "TKLIVE", now).expect("a key of a revoked certificate");
        assert!(
            e.message
                .contains(&format!("serial {}, which is revoked", serial.unwrap())),
            "{}",
            e.message
        );
    }

    #[test]
    fn query_pairs_are_decoded() {
        assert_eq!(
            super::url_pairs("tagKeys=a&tagKeys=b%20c&x"),
            vec![
                ("tagKeys".to_string(), "a".to_string()),
                ("tagKeys".to_string(), "b c".to_string()),
                ("x".to_string(), String::new())
            ]
        );
    }
}
