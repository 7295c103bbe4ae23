//! Reading requests: who the caller is, and bodies and query strings that are refused
//! with a message naming the field and the rule.

use std::sync::Arc;

use axum::extract::{FromRequest, FromRequestParts, Request};
use axum::http::header;
use axum::http::request::Parts;
use serde::de::DeserializeOwned;
use tranche_tls::{token, Identity};

use super::error::HttpError;
use super::{Api, Peer, MAX_BODY};

/// How the caller proved who it is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Via {
    Certificate,
    Token { expires: u64 },
}

/// The caller's identity: from its bearer token when it sent one, else from its
/// client certificate.
#[derive(Debug, Clone)]
pub struct Caller {
    pub who: Identity,
    pub via: Via,
}

fn now_s() -> u64 {
    tranche_controller::mailbox::wall_ms() / 1000
}

impl FromRequestParts<Arc<Api>> for Caller {
    type Rejection = HttpError;

    async fn from_request_parts(parts: &mut Parts, api: &Arc<Api>) -> Result<Caller, HttpError> {
        if let Some(h) = parts.headers.get(header::AUTHORIZATION) {
            let text = h.to_str().map_err(|_| {
                HttpError::unauthenticated("the Authorization header is not ASCII text")
            })?;
            let token = text
                .strip_prefix("Bearer ")
                .or_else(|| text.strip_prefix("bearer "))
                .ok_or_else(|| {
                    HttpError::unauthenticated(
                        "the Authorization header must be `Bearer <token>` (a token from `tranche token issue`)",
                    )
                })?;
            let holder = token::verify_token(&api.certs, token.trim(), now_s())
                .map_err(|e| HttpError::unauthenticated(e.to_string()))?;
            return Ok(Caller {
                who: holder.identity,
                via: Via::Token {
                    expires: holder.expires,
                },
            });
        }
        match parts.extensions.get::<Peer>().and_then(|p| p.cert.clone()) {
            Some(who) => Ok(Caller {
                who,
                via: Via::Certificate,
            }),
            None => Err(HttpError::unauthenticated(
                "no credentials: present a client certificate of this cluster, or a bearer \
                 token from `tranche token issue` in the Authorization header",
            )),
        }
    }
}

/// Where a serde error points: the dotted path of the field at fault, the unknown or
/// missing field's name included.
fn field_of(path: &serde_path_to_error::Path, message: &str) -> String {
    let mut field = path.to_string();
    if field == "." {
        field.clear();
    }
    // A missing field's path is its container's; an unknown one's is already its own.
    if let Some(rest) = message.strip_prefix("missing field `") {
        if let Some(name) = rest.split('`').next() {
            field = if field.is_empty() {
                name.to_string()
            } else {
                format!("{field}.{name}")
            };
        }
    }
    field
}

/// Parses JSON into `T`, naming the field at fault.
pub fn parse_json<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, HttpError> {
    let mut de = serde_json::Deserializer::from_slice(bytes);
    let value: T = serde_path_to_error::deserialize(&mut de).map_err(|e| {
        let inner = e.inner();
        let message = inner.to_string();
        let field = field_of(e.path(), &message);
        if inner.is_syntax() || inner.is_eof() {
            HttpError::bad_request(format!("the body is not valid JSON: {message}"))
        } else if field.is_empty() {
            HttpError::bad_request(format!("the body does not fit: {message}"))
        } else {
            HttpError::invalid(field, message)
        }
    })?;
    de.end().map_err(|e| {
        HttpError::bad_request(format!("the body has text after its JSON value: {e}"))
    })?;
    Ok(value)
}

/// A JSON body of at most [`MAX_BODY`] bytes, with `Content-Type: application/json`.
pub struct JsonBody<T>(pub T);

/// How long a request's body may take to arrive (`[http] body_timeout_s`), put in each
/// request's extensions by the server; 30 s where it is absent.
#[derive(Debug, Clone, Copy)]
pub struct BodyTimeout(pub std::time::Duration);

/// Reads the body, refusing one that is too large, late or not JSON. An empty body is
/// `None`.
async fn body_bytes(req: Request) -> Result<Option<axum::body::Bytes>, HttpError> {
    let too_large = || {
        HttpError::new(
            axum::http::StatusCode::BAD_REQUEST,
            "too_large",
            format!("the request body is larger than {MAX_BODY} bytes (1 MiB)"),
        )
    };
    if let Some(len) = req
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok())
    {
        if len > MAX_BODY as u64 {
            return Err(too_large());
        }
    }
    let json_type = req.headers().get(header::CONTENT_TYPE).map(|v| {
        v.to_str()
            .unwrap_or("")
            .split(';')
            .next()
            .unwrap_or("")
            .trim()
            .eq_ignore_ascii_case("application/json")
    });
    let timeout = req
        .extensions()
        .get::<BodyTimeout>()
        .map_or(std::time::Duration::from_secs(30), |t| t.0);
    let bytes = match tokio::time::timeout(timeout, axum::body::to_bytes(req.into_body(), MAX_BODY))
        .await
    {
        Ok(read) => read.map_err(|_| too_large())?,
        Err(_) => {
            return Err(HttpError::new(
                axum::http::StatusCode::REQUEST_TIMEOUT,
                "body_timeout",
                format!(
                    "the request body did not arrive within {} s (http.body_timeout_s)",
                    timeout.as_secs()
                ),
            ))
        }
    };
    if bytes.is_empty() {
        return Ok(None);
    }
    if json_type == Some(false) {
        return Err(HttpError::bad_request(
            "the body must be JSON, sent with Content-Type: application/json",
        ));
    }
    Ok(Some(bytes))
}

impl<T: DeserializeOwned, S: Send + Sync> FromRequest<S> for JsonBody<T> {
    type Rejection = HttpError;

    async fn from_request(req: Request, _: &S) -> Result<Self, HttpError> {
        match body_bytes(req).await? {
            Some(b) => Ok(JsonBody(parse_json(&b)?)),
            None => Err(HttpError::bad_request("the request needs a JSON body")),
        }
    }
}

/// A JSON body that may be absent (then `T::default()`).
pub struct OptionalJson<T>(pub T);

impl<T: DeserializeOwned + Default, S: Send + Sync> FromRequest<S> for OptionalJson<T> {
    type Rejection = HttpError;

    async fn from_request(req: Request, _: &S) -> Result<Self, HttpError> {
        match body_bytes(req).await? {
            Some(b) => Ok(OptionalJson(parse_json(&b)?)),
            None => Ok(OptionalJson(T::default())),
        }
    }
}

/// Query-string parameters, refused when unknown or of the wrong type.
pub struct QueryArgs<T>(pub T);

impl<T: DeserializeOwned, S: Send + Sync> FromRequestParts<S> for QueryArgs<T> {
    type Rejection = HttpError;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, HttpError> {
        let q = parts.uri.query().unwrap_or("");
        let de = serde_urlencoded::Deserializer::new(form_urlencoded_parse(q));
        serde_path_to_error::deserialize(de)
            .map(QueryArgs)
            .map_err(|e| {
                let message = e.inner().to_string();
                let field = field_of(e.path(), &message);
                if field.is_empty() {
                    HttpError::bad_request(format!("the query string does not fit: {message}"))
                } else {
                    HttpError::invalid(field, message)
                }
            })
    }
}

fn form_urlencoded_parse(q: &str) -> form_urlencoded::Parse<'_> {
    form_urlencoded::parse(q.as_bytes())
}

/// A job id in the path: `42`, or `42_7` for task 7 of array 42.
pub fn job_id(text: &str) -> Result<tranche_model::JobRef, HttpError> {
    tranche_model::JobRef::parse(text).map_err(|_| {
        HttpError::invalid(
            "id",
            format!("a job id is a positive integer, or ARRAY_TASK such as 42_7, not `{text}`"),
        )
    })
}
