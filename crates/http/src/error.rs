//! The HTTP API's one error shape, `{"error": {"code", "message", "field"?}}`, and how
//! the service layer's errors map onto it.

use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use serde::Serialize;
use tranche_proto::{ApiError, Refusal, Response as Answer};
use utoipa::ToSchema;

/// Seconds a client waits before retrying a 503 (an election takes about this long).
pub const RETRY_AFTER_S: u32 = 1;

/// What went wrong.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct ErrorDetail {
    /// A stable machine-readable code: `bad_request`, `invalid`, `unauthenticated`,
    /// `forbidden`, `not_found`, `conflict`, `unavailable`.
    pub code: String,
    /// What a person reads: what was refused and by which rule.
    pub message: String,
    /// The request field at fault (a dotted path such as `checkpoint.grace_s`), when one is.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub field: Option<String>,
}

/// Every error answer of the API.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct ErrorBody {
    pub error: ErrorDetail,
}

/// An error answer: its status and body.
#[derive(Debug, Clone)]
pub struct HttpError {
    pub status: StatusCode,
    pub body: ErrorBody,
}

impl HttpError {
    pub fn new(status: StatusCode, code: &str, message: impl Into<String>) -> HttpError {
        HttpError {
            status,
            body: ErrorBody {
                error: ErrorDetail {
                    code: code.into(),
                    message: message.into(),
                    field: None,
                },
            },
        }
    }

    pub fn with_field(mut self, field: impl Into<String>) -> HttpError {
        let f = field.into();
        self.body.error.field = (!f.is_empty()).then_some(f);
        self
    }

    pub fn bad_request(message: impl Into<String>) -> HttpError {
        HttpError::new(StatusCode::BAD_REQUEST, "bad_request", message)
    }

    /// A field that breaks its rule.
    pub fn invalid(field: impl Into<String>, rule: impl Into<String>) -> HttpError {
        let field = field.into();
        let rule = rule.into();
        HttpError::new(
            StatusCode::BAD_REQUEST,
            "invalid",
            format!("invalid `{field}`: {rule}"),
        )
        .with_field(field)
    }

    pub fn unauthenticated(message: impl Into<String>) -> HttpError {
        HttpError::new(StatusCode::UNAUTHORIZED, "unauthenticated", message)
    }

    pub fn not_found(message: impl Into<String>) -> HttpError {
        HttpError::new(StatusCode::NOT_FOUND, "not_found", message)
    }

    pub fn unavailable(message: impl Into<String>) -> HttpError {
        HttpError::new(StatusCode::SERVICE_UNAVAILABLE, "unavailable", message)
    }
}

impl From<ApiError> for HttpError {
    fn from(e: ApiError) -> HttpError {
        match e {
            ApiError::Rejected(Refusal::Invalid(v)) => HttpError::invalid(v.field, v.rule),
            ApiError::Rejected(Refusal::NotFound { kind, name }) => {
                HttpError::not_found(format!("{kind} {name} does not exist"))
            }
            ApiError::Rejected(Refusal::Conflict(m)) => {
                HttpError::new(StatusCode::CONFLICT, "conflict", m)
            }
            ApiError::Rejected(Refusal::Stale(m)) => {
                HttpError::new(StatusCode::CONFLICT, "conflict", format!("stale: {m}"))
            }
            ApiError::Unauthorized(m) => HttpError::new(StatusCode::FORBIDDEN, "forbidden", m),
            e @ ApiError::NotLeader { .. } => HttpError::unavailable(e.to_string()),
            ApiError::Unavailable(m) => HttpError::unavailable(m),
            ApiError::BadRequest(m) => HttpError::bad_request(m),
            ApiError::NotFound(m) => HttpError::not_found(m),
        }
    }
}

impl IntoResponse for HttpError {
    fn into_response(self) -> Response {
        let mut r = (self.status, axum::Json(self.body)).into_response();
        let h = r.headers_mut();
        match self.status {
            StatusCode::SERVICE_UNAVAILABLE => {
                h.insert(header::RETRY_AFTER, HeaderValue::from(RETRY_AFTER_S));
            }
            StatusCode::UNAUTHORIZED => {
                h.insert(
                    header::WWW_AUTHENTICATE,
                    HeaderValue::from_static("Bearer realm=\"tranche\""),
                );
            }
            _ => {}
        }
        r
    }
}

/// The error of an answer of the service layer that the request did not expect (an
/// election or a forward under way changed who answers): retry.
pub(crate) fn unexpected(a: &Answer) -> HttpError {
    HttpError::unavailable(format!(
        "the controller answered with {} where another answer was expected; retry",
        a.kind()
    ))
}
