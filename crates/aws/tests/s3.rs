//! The S3 endpoint in process: requests signed for `s3` with the cluster's access keys
//! reach the object store in their key's user's namespace; a bad signature, an unknown
//! key, or an unsigned request reach nothing.

mod common;

use axum::body::Body;
use axum::http::{HeaderMap, HeaderValue, Method, Request, StatusCode};
use common::*;
use tranche_aws::sigv4;
use tranche_state::State;

/// `method path` with `body`, signed for S3 by key `id` with `secret`, as botocore
/// signs it (the payload's hash in `x-amz-content-sha256`, signed).
fn s3_request(method: Method, path: &str, body: &[u8], id: &str, secret: &str) -> Request<Body> {
    let mut headers = HeaderMap::new();
    headers.insert("host", HeaderValue::from_static("c1.tranche.test:8443"));
    let hash = ring::digest::digest(&ring::digest::SHA256, body);
    let hex: String = hash.as_ref().iter().map(|b| format!("{b:02x}")).collect();
    headers.insert("x-amz-content-sha256", HeaderValue::from_str(&hex).unwrap());
    headers.insert(
        "x-amz-date",
        HeaderValue::from_str(&sigv4::format_amz_date(now_s())).unwrap(),
    );
    let auth = sigv4::authorization_for(
        &sigv4::SignedRequest {
            method: method.as_str(),
            path,
            query: "",
            headers: &headers,
            body,
        },
        id,
        secret,
        REGION,
        "s3",
        &["host", "x-amz-content-sha256", "x-amz-date"],
    );
    headers.insert("authorization", HeaderValue::from_str(&auth).unwrap());
    let mut req = Request::builder()
        .method(method)
        .uri(path)
        .body(Body::from(body.to_vec()))
        .unwrap();
    *req.headers_mut() = headers;
    req
}

fn text(r: &Reply) -> String {
    String::from_utf8_lossy(&r.body).into_owned()
}

#[tokio::test]
async fn s3_signed_with_the_clusters_keys_reaches_only_the_users_own_buckets() {
    let aws = Aws::new(State::new());
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("s3");
    let s3 = tranche_aws::s3::service(aws.h.api.clone(), MASTER.to_vec(), &store).unwrap();
    let app = tranche_aws::s3::divert(aws.app.clone(), Some(s3));
    let (alice, bob) = (aws.alice.clone(), aws.bob.clone());
    let send = |req| common::send(&app, req);
    let signed = |m: Method, p: &str, b: &[u8], id: &str| s3_request(m, p, b, id, &aws.secret(id));

    let r = send(signed(Method::PUT, "/models", b"", &alice)).await;
    assert_eq!(r.status, StatusCode::OK, "{}", text(&r));
    let r = send(signed(Method::PUT, "/models/run/a.txt", b"hello", &alice)).await;
    assert_eq!(r.status, StatusCode::OK, "{}", text(&r));
    let r = send(signed(Method::GET, "/models/run/a.txt", b"", &alice)).await;
    assert_eq!((r.status, text(&r).as_str()), (StatusCode::OK, "hello"));
    assert_eq!(
        std::fs::read_to_string(store.join("alice/models/run/a.txt")).unwrap(),
        "hello"
    );
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(&store).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o700);

    // Bob's namespace has no bucket `models`.
    let r = send(signed(Method::GET, "/models/run/a.txt", b"", &bob)).await;
    assert_eq!(r.status, StatusCode::NOT_FOUND, "{}", text(&r));
    assert!(!text(&r).contains("hello"), "{}", text(&r));
    let r = send(signed(Method::HEAD, "/models", b"", &bob)).await;
    assert_eq!(r.status, StatusCode::NOT_FOUND);

    // Bob's key id with another secret: refused, and nothing is written.
    let forged = s3_request(
        Method::PUT,
        "/models/run/a.txt",
        b"forged",
        &bob,
        &aws.secret(&alice),
    );
    let r = send(forged).await;
    assert_eq!(r.status, StatusCode::FORBIDDEN, "{}", text(&r));
    assert!(text(&r).contains("SignatureDoesNotMatch"), "{}", text(&r));
    let mut changed = signed(Method::PUT, "/models/run/a.txt", b"hello", &alice);
    *changed.body_mut() = Body::from("tampered");
    let r = send(changed).await;
    assert!(!r.status.is_success(), "{}", text(&r));
    assert_eq!(
        std::fs::read_to_string(store.join("alice/models/run/a.txt")).unwrap(),
        "hello"
    );

    // An unknown key.
    let r = send(s3_request(Method::GET, "/models", b"", "TKNOSUCHKEY", "x")).await;
    assert_eq!(r.status, StatusCode::FORBIDDEN, "{}", text(&r));
    assert!(text(&r).contains("InvalidAccessKeyId"), "{}", text(&r));

    // An unsigned request is not S3's: the API answers that there is no such route.
    let r = send(
        Request::builder()
            .uri("/models/run/a.txt")
            .body(Body::empty())
            .unwrap(),
    )
    .await;
    assert_eq!(r.status, StatusCode::NOT_FOUND);
    assert!(!text(&r).contains("hello"));
}

#[tokio::test]
async fn without_s3_dir_s3_requests_are_told_so() {
    let aws = Aws::new(State::new());
    let app = tranche_aws::s3::divert(aws.app.clone(), None);
    let r = common::send(
        &app,
        s3_request(Method::GET, "/", b"", &aws.alice, &aws.secret(&aws.alice)),
    )
    .await;
    assert_eq!(r.status, StatusCode::NOT_IMPLEMENTED);
    assert!(text(&r).contains("[aws] s3_dir"), "{}", text(&r));
}
