//! Who may call the AWS Batch-compatible endpoint, in process over the controller's
//! test rig: a request signed by a live key acts as the key's identity; an unsigned
//! request, a wrong signature, a key unknown, revoked or expired, a stale date and a
//! malformed header are refused with AWS's codes (`__type`, the `x-amzn-ErrorType`
//! header) and HTTP statuses, before anything is done.

mod common;

use axum::body::Body;
use axum::http::{Method, Request};
use common::*;
use serde_json::json;
use tranche_state::State;

const LIST: &str = "/v1/listschedulingpolicies";

/// Changes access key `id` in the rig's applied state.
fn key_of(aws: &Aws, id: &str, change: impl FnOnce(&mut tranche_model::AccessKey)) {
    let mut sh = aws.h.rig.shared.write().unwrap();
    change(sh.state.keys.get_mut(id).expect("a key of the rig"));
}

#[tokio::test]
async fn a_request_signed_by_a_live_key_is_answered() {
    let aws = Aws::new(State::new());
    let r = aws
        .op(&aws.alice, "ListSchedulingPolicies", json!({}))
        .await;
    assert_eq!(ok(&r), json!({"schedulingPolicies": []}));
    // The same request with a query string and an empty body.
    let r = aws
        .signed(
            &aws.alice,
            Method::POST,
            &format!("{LIST}?maxResults=5"),
            vec![],
        )
        .await;
    ok(&r);
}

#[tokio::test]
async fn bad_signatures_and_keys_get_awss_codes() {
    let aws = Aws::new(State::new());
    let body = || b"{}".to_vec();
    let secret = aws.secret(&aws.alice);

    // No Authorization header at all.
    let req = Request::post(LIST)
        .header("content-type", "application/json")
        .body(Body::from(body()))
        .unwrap();
    let r = aws.send(req).await;
    assert_eq!(
        aws_error(&r),
        (
            403,
            "MissingAuthenticationTokenException".into(),
            "Missing Authentication Token".into()
        )
    );
    assert_eq!(
        r.json().as_object().unwrap().len(),
        2,
        "`__type` and `message`: {}",
        r.text()
    );

    // A wrong secret; a body changed after signing.
    let r = aws
        .send(sign(
            Method::POST,
            LIST,
            body(),
            &aws.alice,
            &"x".repeat(40),
            now_s(),
        ))
        .await;
    let (status, ty, message) = aws_error(&r);
    assert_eq!((status, ty.as_str()), (403, "InvalidSignatureException"));
    assert!(
        message.starts_with("The request signature we calculated does not match"),
        "{message}"
    );
    let mut req = sign(Method::POST, LIST, body(), &aws.alice, &secret, now_s());
    *req.body_mut() = Body::from(&br#"{"maxResults": 1}"#[..]);
    let r = aws.send(req).await;
    assert_eq!(aws_error(&r).1, "InvalidSignatureException");
    // Signed for another path than the one sent.
    let mut req = sign(
        Method::POST,
        "/v1/listquotashares",
        body(),
        &aws.alice,
        &secret,
        now_s(),
    );
    *req.uri_mut() = LIST.parse().unwrap();
    assert_eq!(
        aws_error(&aws.send(req).await).1,
        "InvalidSignatureException"
    );

    // A date more than 15 minutes off.
    let r = aws
        .send(sign(
            Method::POST,
            LIST,
            body(),
            &aws.alice,
            &secret,
            now_s() - 20 * 60,
        ))
        .await;
    assert_eq!(aws_error(&r).0, 403);
    assert_eq!(aws_error(&r).1, "InvalidSignatureException");

    // A malformed Authorization header.
    let mut req = sign(Method::POST, LIST, body(), &aws.alice, &secret, now_s());
    req.headers_mut()
        .insert("authorization", "AWS4-HMAC-SHA256 garbage".parse().unwrap());
    let r = aws.send(req).await;
    // Answered 400, as AWS answers it (other refused signatures are 403).
    assert_eq!(
        (aws_error(&r).0, aws_error(&r).1.as_str()),
        (400, "IncompleteSignatureException")
    );

    // A key that does not exist.
    let unknown = format!("TK{}", "A".repeat(18));
    let r = aws
        .send(sign(
            Method::POST,
            LIST,
            body(),
            &unknown,
            &"x".repeat(40),
            now_s(),
        ))
        .await;
    assert_eq!(
        aws_error(&r),
        (
            403,
            "UnrecognizedClientException".into(),
            "The security token included in the request is invalid.".into()
        )
    );

    // A revoked key, then an expired one.
    key_of(&aws, &aws.bob, |k| k.revoked_at = Some(1));
    let r = aws.op(&aws.bob, "ListSchedulingPolicies", json!({})).await;
    assert_eq!(aws_error(&r).1, "UnrecognizedClientException");
    key_of(&aws, &aws.alice, |k| k.expires_at = Some(1));
    let r = aws
        .op(&aws.alice, "ListSchedulingPolicies", json!({}))
        .await;
    let (status, ty, message) = aws_error(&r);
    assert_eq!((status, ty.as_str()), (403, "ExpiredTokenException"));
    assert!(message.contains(&aws.alice), "{message}");
    assert_eq!(aws.h.rig.writes(), 0);
}

#[tokio::test]
async fn requests_the_endpoint_does_not_serve_are_client_errors() {
    let aws = Aws::new(State::new());
    let r = aws
        .op(&aws.admin, "ListComputeEnvironments", json!({}))
        .await;
    client_error(&r, "operation `listcomputeenvironments` is not supported");
    let r = aws
        .signed(
            &aws.admin,
            Method::POST,
            "/v1/createjobqueue",
            b"{not json".to_vec(),
        )
        .await;
    client_error(&r, "the request body is not valid JSON");

    // Without `[aws]` the endpoint is off, and says so.
    let h = Harness::new(State::new());
    let app = h.router(tranche_aws::router(None));
    let r = send(
        &app,
        sign(Method::POST, LIST, b"{}".to_vec(), "TKX", "x", now_s()),
    )
    .await;
    client_error(&r, "AWS Batch-compatible endpoint is off");
}
