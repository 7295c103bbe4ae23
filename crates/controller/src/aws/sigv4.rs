//! TEMPORARY stand-in until the verifier lands: reads the key id only.
pub struct SignedRequest<'a> {
    pub method: &'a str,
    pub path: &'a str,
    pub query: &'a str,
    pub headers: &'a axum::http::HeaderMap,
    pub body: &'a [u8],
}
pub struct Verified {
    pub access_key_id: String,
}
pub struct SigError(String);
impl SigError {
    pub fn code(&self) -> &'static str {
        "UnrecognizedClientException"
    }
    pub fn message(&self) -> String {
        self.0.clone()
    }
}
pub fn verify(
    r: &SignedRequest<'_>,
    _regions: &[&str],
    _now: u64,
    secret_of: impl Fn(&str) -> Option<String>,
) -> Result<Verified, SigError> {
    let h = r
        .headers
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .ok_or(SigError("no Authorization".into()))?;
    let id = h
        .split("Credential=")
        .nth(1)
        .and_then(|c| c.split('/').next())
        .ok_or(SigError("no Credential".into()))?;
    secret_of(id).ok_or(SigError(
        "The security token included in the request is invalid.".into(),
    ))?;
    Ok(Verified {
        access_key_id: id.to_string(),
    })
}
