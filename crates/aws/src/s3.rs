//! The S3 endpoint: the object calls the SageMaker SDK and the AWS CLI make (buckets,
//! objects, listings, multipart uploads), on the same listener and URL as the rest of
//! the endpoint, path-style (`https://<controller>/<bucket>/<key>`).
//!
//! The protocol (XML bodies, S3's SigV4 with its streaming and unsigned payloads) is
//! [`s3s`]'s; the objects are files under `[aws] s3_dir`, kept by [`s3s_fs`]. A
//! request is S3's when its SigV4 credential is scoped to service `s3` (the
//! `Authorization` header, or `X-Amz-Credential` of a presigned URL); [`divert`] sends
//! those to S3 before the other routes see them.
//!
//! Keys: the same access keys as the rest of the endpoint. s3s asks the key store for an
//! access key's secret, which is derived from the cluster's key secret exactly as for
//! Batch, after the same refusals (unknown, revoked or expired keys, keys of revoked
//! certificates).
//!
//! Who reads what: every user has a namespace of buckets of their own,
//! `<s3_dir>/<user>/<bucket>/<key>`. A request acts in the namespace of its key's
//! user, so a user lists, reads and writes only their own buckets, and two users may
//! each have a bucket of the same name (the SageMaker SDK's default bucket,
//! `sagemaker-<region>-<account>`, is then every user's own). An admin's key is a user
//! like any other here. `s3_dir` itself is made 0700: on the nodes no user reaches the
//! objects except through a job's channel.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use axum::extract::Request;
use axum::middleware::Next;
use axum::response::IntoResponse;
use axum::Router;
use s3s::auth::{S3Auth, SecretKey};
use s3s::dto::*;
use s3s::service::{S3Service, S3ServiceBuilder};
use s3s::{S3Error, S3ErrorCode, S3Request, S3Response, S3Result, S3};
use s3s_fs::FileSystem;
use tranche_controller::mailbox::wall_ms;
use tranche_http::Api;

/// The S3 service of a controller whose `[aws] s3_dir` is set.
pub fn service(api: Arc<Api>, master: Vec<u8>, dir: &Path) -> std::io::Result<S3Service> {
    use std::os::unix::fs::PermissionsExt;
    std::fs::create_dir_all(dir)?;
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))?;
    let store = Namespaces {
        root: dir.canonicalize()?,
        api: api.clone(),
        open: Mutex::new(HashMap::new()),
    };
    let mut b = S3ServiceBuilder::new(store);
    b.set_auth(Keys { api, master });
    Ok(b.build())
}

/// `app` with S3's requests sent to `s3` (see the module docs); where the cluster has
/// no S3 (`None`), they are answered that it has none.
pub fn divert(app: Router, s3: Option<S3Service>) -> Router {
    app.layer(axum::middleware::from_fn(
        move |req: Request, next: Next| {
            let s3 = s3.clone();
            async move {
                if !is_s3(&req) {
                    return next.run(req).await;
                }
                let Some(s3) = s3 else {
                    return (
                        axum::http::StatusCode::NOT_IMPLEMENTED,
                        "this cluster serves no S3: its controllers' config has no [aws] s3_dir",
                    )
                        .into_response();
                };
                match s3.call(req.map(s3s::Body::http_body_unsync)).await {
                    Ok(r) => r.map(axum::body::Body::new),
                    Err(e) => (
                        axum::http::StatusCode::INTERNAL_SERVER_ERROR,
                        format!("the S3 request failed: {}", s3s::StdError::from(e)),
                    )
                        .into_response(),
                }
            }
        },
    ))
}

/// Whether `req` is signed for S3.
fn is_s3(req: &Request) -> bool {
    let scoped = |cred: &str| cred.contains("/s3/aws4_request");
    let header = req
        .headers()
        .get(axum::http::header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|a| a.starts_with("AWS4-HMAC-SHA256 ") && scoped(a));
    let presigned = req.uri().query().is_some_and(|q| {
        q.split('&').any(|p| {
            p.strip_prefix("X-Amz-Credential=")
                .is_some_and(|c| scoped(&c.replace("%2F", "/").replace("%2f", "/")))
        })
    });
    header || presigned
}

/// The secrets of the cluster's access keys, for s3s's signature check.
struct Keys {
    api: Arc<Api>,
    master: Vec<u8>,
}

#[async_trait::async_trait]
impl S3Auth for Keys {
    async fn get_secret_key(&self, access_key: &str) -> S3Result<SecretKey> {
        let sh = self.api.shared.read().unwrap();
        match super::key_refusal(&self.api.certs, &sh.state, access_key, wall_ms()) {
            Some(e) => Err(S3Error::with_message(
                S3ErrorCode::InvalidAccessKeyId,
                e.message,
            )),
            None => Ok(SecretKey::from(tranche_tls::keys::derive_secret(
                &self.master,
                access_key,
            ))),
        }
    }
}

/// The users' namespaces: one [`FileSystem`] per user, opened on first use.
struct Namespaces {
    root: PathBuf,
    api: Arc<Api>,
    open: Mutex<HashMap<String, Arc<FileSystem>>>,
}

/// Whether `user` may name a directory of `s3_dir` (Tranche's user names all may).
fn plain_name(user: &str) -> bool {
    !user.is_empty()
        && !user.starts_with('.')
        && user
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-_.@".contains(&b))
}

/// `<s3_dir>/<user>`: where `user`'s buckets are.
pub fn namespace(s3_dir: &Path, user: &str) -> Option<PathBuf> {
    plain_name(user).then(|| s3_dir.join(user))
}

impl Namespaces {
    /// The namespace of the request's key's user.
    fn of<T>(&self, req: &S3Request<T>) -> S3Result<Arc<FileSystem>> {
        let denied = |m: String| S3Error::with_message(S3ErrorCode::AccessDenied, m);
        let key = req
            .credentials
            .as_ref()
            .ok_or_else(|| denied("sign the request with an access key".into()))?;
        let user = {
            let sh = self.api.shared.read().unwrap();
            let k = sh
                .state
                .keys
                .get(&key.access_key)
                .ok_or_else(|| denied(format!("access key {} is not known", key.access_key)))?;
            k.user.to_string()
        };
        let dir = namespace(&self.root, &user).ok_or_else(|| {
            denied(format!(
                "user `{user}` cannot have buckets: the name is not a plain directory name"
            ))
        })?;
        let mut open = self.open.lock().unwrap();
        if let Some(fs) = open.get(&user) {
            return Ok(fs.clone());
        }
        let failed = |e: String| {
            S3Error::with_message(
                S3ErrorCode::InternalError,
                format!("cannot open {}: {e}", dir.display()),
            )
        };
        std::fs::create_dir_all(&dir).map_err(|e| failed(e.to_string()))?;
        let fs = FileSystem::new(&dir).map_err(|e| failed(format!("{e:?}")))?;
        let fs = Arc::new(fs);
        open.insert(user, fs.clone());
        Ok(fs)
    }
}

/// The part of the store's file system that uploads leave free: the controllers' data
/// may share it, and no user's uploads may fill it.
const RESERVE_PERCENT: u64 = 5;

/// Whether `adding` bytes leave the file system of `root` at least [`RESERVE_PERCENT`]
/// free; the refusal names what is left.
fn room(root: &Path, adding: u64) -> S3Result<()> {
    let st = nix::sys::statvfs::statvfs(root).map_err(|e| {
        S3Error::with_message(
            S3ErrorCode::InternalError,
            format!("cannot read the free space of {}: {e}", root.display()),
        )
    })?;
    let unit = st.fragment_size() as u64;
    let (total, avail) = (
        st.blocks() as u64 * unit,
        st.blocks_available() as u64 * unit,
    );
    let reserve = total / 100 * RESERVE_PERCENT;
    if avail.saturating_sub(adding) < reserve {
        return Err(S3Error::with_message(
            S3ErrorCode::ServiceUnavailable,
            format!(
                "the S3 store is full: {} MiB free of {} MiB, and an upload may not leave \
                 less than {RESERVE_PERCENT}% ({} MiB) free; this one adds {} MiB",
                avail >> 20,
                total >> 20,
                reserve >> 20,
                adding.div_ceil(1 << 20)
            ),
        ));
    }
    Ok(())
}

/// The bytes a request's body adds (0 where it has no length).
fn length(len: Option<i64>) -> u64 {
    len.map_or(0, |n| n.max(0) as u64)
}

/// Each operation served, passed to the caller's namespace; an operation that writes
/// gives the bytes it adds, checked against [`room`] first.
macro_rules! served {
    ($($op:ident($input:ty) -> $output:ty $(, adds $adds:expr)?;)*) => {
        #[async_trait::async_trait]
        impl S3 for Namespaces {
            $(
                async fn $op(&self, req: S3Request<$input>) -> S3Result<S3Response<$output>> {
                    let fs = self.of(&req)?;
                    $( room(&self.root, ($adds)(&req.input))?; )?
                    fs.$op(req).await
                }
            )*
        }
    };
}

served! {
    list_buckets(ListBucketsInput) -> ListBucketsOutput;
    create_bucket(CreateBucketInput) -> CreateBucketOutput, adds |_: &CreateBucketInput| 0;
    head_bucket(HeadBucketInput) -> HeadBucketOutput;
    delete_bucket(DeleteBucketInput) -> DeleteBucketOutput;
    get_bucket_location(GetBucketLocationInput) -> GetBucketLocationOutput;
    put_object(PutObjectInput) -> PutObjectOutput,
        adds |i: &PutObjectInput| length(i.content_length);
    get_object(GetObjectInput) -> GetObjectOutput;
    head_object(HeadObjectInput) -> HeadObjectOutput;
    copy_object(CopyObjectInput) -> CopyObjectOutput, adds |_: &CopyObjectInput| 0;
    delete_object(DeleteObjectInput) -> DeleteObjectOutput;
    delete_objects(DeleteObjectsInput) -> DeleteObjectsOutput;
    list_objects(ListObjectsInput) -> ListObjectsOutput;
    list_objects_v2(ListObjectsV2Input) -> ListObjectsV2Output;
    create_multipart_upload(CreateMultipartUploadInput) -> CreateMultipartUploadOutput,
        adds |_: &CreateMultipartUploadInput| 0;
    upload_part(UploadPartInput) -> UploadPartOutput,
        adds |i: &UploadPartInput| length(i.content_length);
    list_parts(ListPartsInput) -> ListPartsOutput;
    complete_multipart_upload(CompleteMultipartUploadInput) -> CompleteMultipartUploadOutput,
        adds |_: &CompleteMultipartUploadInput| 0;
    abort_multipart_upload(AbortMultipartUploadInput) -> AbortMultipartUploadOutput;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_s3_credentials_are_diverted() {
        let req = |auth: Option<&str>, uri: &str| {
            let mut b = axum::http::Request::builder().uri(uri);
            if let Some(a) = auth {
                b = b.header("authorization", a);
            }
            b.body(axum::body::Body::empty()).unwrap()
        };
        let s3 = "AWS4-HMAC-SHA256 Credential=TK1/20261201/us-west-2/s3/aws4_request, SignedHeaders=host, Signature=00";
        let batch = s3.replace("/s3/", "/batch/");
        assert!(is_s3(&req(Some(s3), "/b/k")));
        assert!(!is_s3(&req(Some(&batch), "/v1/listservicejobs")));
        assert!(!is_s3(&req(None, "/api/v1/jobs")));
        assert!(is_s3(&req(
            None,
            "/b/k?X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Credential=TK1%2F20261201%2Fus-west-2%2Fs3%2Faws4_request"
        )));
    }

    #[test]
    fn an_upload_that_would_leave_less_than_the_reserve_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let st = nix::sys::statvfs::statvfs(dir.path()).unwrap();
        let unit = st.fragment_size() as u64;
        let avail = st.blocks_available() as u64 * unit;
        let reserve = st.blocks() as u64 * unit / 100 * RESERVE_PERCENT;
        if avail > reserve + (1 << 20) {
            room(dir.path(), 1 << 20).unwrap();
        }
        let e = room(dir.path(), avail).unwrap_err();
        assert_eq!(e.code(), &S3ErrorCode::ServiceUnavailable);
        let m = e.message().unwrap_or_default();
        assert!(m.contains("S3 store is full") && m.contains("5%"), "{m}");
    }

    #[test]
    fn a_namespace_is_a_plain_directory_name() {
        let d = Path::new("/srv/s3");
        assert_eq!(namespace(d, "alice"), Some(PathBuf::from("/srv/s3/alice")));
        for bad in ["", "..", ".hidden", "a/b", "a b"] {
            assert_eq!(namespace(d, bad), None, "{bad}");
        }
    }
}
