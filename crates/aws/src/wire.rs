//! The endpoint's wire conventions: every answer carries `x-amzn-RequestId`; errors
//! are `ClientException` (400) or `ServerException` (500) with `{"message"}` and the
//! code in `x-amzn-ErrorType`, as botocore reads them; requests whose signature or key
//! is refused get AWS's 403 codes.

use axum::http::{HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use serde::de::DeserializeOwned;
use tranche_proto::{ApiError, Refusal};

/// What AWS answers when an object of that name is there already (clients match on it).
pub const EXISTS: &str = "Object already exists";

#[derive(Debug, Clone)]
pub struct AwsError {
    pub status: StatusCode,
    pub code: &'static str,
    pub message: String,
}

pub type AwsResult<T> = Result<T, AwsError>;

impl AwsError {
    /// A request the client got wrong (or may not make): `ClientException`.
    pub fn client(message: impl Into<String>) -> AwsError {
        AwsError {
            status: StatusCode::BAD_REQUEST,
            code: "ClientException",
            message: message.into(),
        }
    }

    /// The server failed (botocore retries these): `ServerException`.
    pub fn server(message: impl Into<String>) -> AwsError {
        AwsError {
            status: StatusCode::INTERNAL_SERVER_ERROR,
            code: "ServerException",
            message: message.into(),
        }
    }

    /// A request the client got wrong, answered with the code of a service other than
    /// Batch (`ValidationException`, `ResourceNotFoundException`, ...).
    pub fn json_client(code: &'static str, message: impl Into<String>) -> AwsError {
        AwsError {
            status: StatusCode::BAD_REQUEST,
            code,
            message: message.into(),
        }
    }

    /// A refused signature or key (403, AWS's codes).
    pub fn auth(code: &'static str, message: impl Into<String>) -> AwsError {
        AwsError {
            status: StatusCode::FORBIDDEN,
            code,
            message: message.into(),
        }
    }

    /// A refused signature, with the status AWS answers it with (400 for a malformed
    /// `Authorization` header, 403 for the rest).
    pub fn signature(e: &crate::sigv4::SigError) -> AwsError {
        AwsError {
            status: StatusCode::from_u16(e.status()).unwrap_or(StatusCode::FORBIDDEN),
            code: e.code(),
            message: e.message(),
        }
    }

    /// A member that breaks its rule, in AWS's validation wording.
    pub fn invalid(member: &str, rule: impl std::fmt::Display) -> AwsError {
        AwsError::client(format!("Invalid value at '{member}': {rule}"))
    }

    /// An enum member with a value outside its set.
    pub fn bad_enum(member: &str, value: &str, allowed: &[&str]) -> AwsError {
        AwsError::client(format!(
            "1 validation error detected: Value '{value}' at '{member}' failed to satisfy constraint: Member must satisfy enum value set: [{}]",
            allowed.join(", ")
        ))
    }
}

impl From<ApiError> for AwsError {
    fn from(e: ApiError) -> AwsError {
        match e {
            ApiError::Rejected(Refusal::Invalid(v)) => AwsError::invalid(&v.field, v.rule),
            ApiError::Rejected(Refusal::NotFound { kind, name }) => {
                AwsError::client(format!("{kind} {name} does not exist"))
            }
            ApiError::Rejected(Refusal::Conflict(m)) => AwsError::client(m),
            ApiError::Rejected(Refusal::Stale(m)) => AwsError::client(m),
            ApiError::Unauthorized(m) => AwsError::client(format!("not authorized: {m}")),
            ApiError::BadRequest(m) | ApiError::NotFound(m) => AwsError::client(m),
            // No leader for now: a 500 that botocore retries.
            e @ ApiError::NotLeader { .. } => AwsError::server(e.to_string()),
            ApiError::Unavailable(m) => AwsError::server(m),
        }
    }
}

/// A fresh request id (random, in the UUID layout AWS uses).
pub fn request_id() -> String {
    let mut b = [0u8; 16];
    let _ = ring::rand::SecureRandom::fill(&ring::rand::SystemRandom::new(), &mut b);
    let h: String = b.iter().map(|x| format!("{x:02x}")).collect();
    format!(
        "{}-{}-{}-{}-{}",
        &h[0..8],
        &h[8..12],
        &h[12..16],
        &h[16..20],
        &h[20..32]
    )
}

fn with_request_id(mut r: Response, id: &str) -> Response {
    if let Ok(v) = HeaderValue::from_str(id) {
        r.headers_mut().insert("x-amzn-RequestId", v);
    }
    r
}

/// A successful answer: the JSON body, with the request id.
pub fn ok(body: serde_json::Value, id: &str) -> Response {
    with_request_id((StatusCode::OK, axum::Json(body)).into_response(), id)
}

/// A successful answer of an AWS JSON 1.1 service (SageMaker, CloudWatch Logs).
pub fn ok_json11(body: serde_json::Value, id: &str) -> Response {
    let mut r = ok(body, id);
    r.headers_mut().insert(
        axum::http::header::CONTENT_TYPE,
        HeaderValue::from_static("application/x-amz-json-1.1"),
    );
    r
}

/// An error answer, with the request id.
pub fn error(e: &AwsError, id: &str) -> Response {
    let mut r = (
        e.status,
        axum::Json(serde_json::json!({ "message": e.message, "__type": e.code })),
    )
        .into_response();
    r.headers_mut()
        .insert("x-amzn-ErrorType", HeaderValue::from_static(e.code));
    with_request_id(r, id)
}

/// Parses a request body into `T`; a member of the wrong type is named.
pub fn parse<T: DeserializeOwned>(bytes: &[u8]) -> AwsResult<T> {
    let bytes: &[u8] = if bytes.iter().all(|b| b.is_ascii_whitespace()) {
        b"{}"
    } else {
        bytes
    };
    let mut de = serde_json::Deserializer::from_slice(bytes);
    serde_path_to_error::deserialize(&mut de).map_err(|e| {
        let path = e.path().to_string();
        let inner = e.inner();
        if inner.is_syntax() || inner.is_eof() {
            AwsError::client(format!("the request body is not valid JSON: {inner}"))
        } else if path == "." {
            AwsError::client(format!("the request body does not fit: {inner}"))
        } else {
            AwsError::invalid(&path, inner)
        }
    })
}
