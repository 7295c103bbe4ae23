//! Why an image could not be made into a rootfs: [`ImageError`], the `reason` of
//! [`ExecError::Image`](crate::exec::ExecError::Image).

use std::io;
use std::path::{Path, PathBuf};

use crate::exec::layer::LayerError;

/// Why an image could not be made into a rootfs. Messages name the file, blob or limit
/// at fault.
#[derive(Debug, thiserror::Error)]
pub enum ImageError {
    /// The image names nothing that exists.
    #[error("{source}: {}", OPEN_HINT)]
    NotFound {
        /// The underlying error.
        source: io::Error,
    },
    /// The image cannot be opened with the job user's rights.
    #[error("{source}: {}", OPEN_HINT)]
    Unreadable {
        /// The underlying error.
        source: io::Error,
    },
    /// The image is neither a directory nor a regular file.
    #[error("is {kind}: neither a directory nor a regular file")]
    NotFileOrDir {
        /// What it is (`a FIFO`, `a socket`, ...).
        kind: &'static str,
    },
    /// The layout's `index.json` cannot be opened.
    #[error("index.json: {source}")]
    Index {
        /// The underlying error.
        source: io::Error,
    },
    /// An archive without `index.json`.
    #[error("no index.json in the archive: not an OCI image layout")]
    NoIndex,
    /// An index lists no manifest.
    #[error("{what}: no `manifests`")]
    NoManifests {
        /// The index.
        what: String,
    },
    /// An index has no manifest for this node's platform.
    #[error("{what}: no manifest for linux/{arch} (has {platforms})")]
    NoPlatform {
        /// The index.
        what: String,
        /// This node's architecture.
        arch: &'static str,
        /// The platforms the index has, comma-separated.
        platforms: String,
    },
    /// An index entry without a digest.
    #[error("{what}: a manifest entry has no `digest`")]
    EntryWithoutDigest {
        /// The index.
        what: String,
    },
    /// A digest that is not `ALGORITHM:HEX`.
    #[error("digest `{digest}`: expected ALGORITHM:HEX")]
    DigestForm {
        /// The digest as given.
        digest: String,
    },
    /// A digest of an algorithm other than SHA-256 and SHA-512.
    #[error("digest `{digest}`: unsupported algorithm `{algorithm}`")]
    DigestAlgorithm {
        /// The digest as given.
        digest: String,
        /// Its algorithm.
        algorithm: String,
    },
    /// A digest whose hex part has the wrong length or characters.
    #[error("digest `{digest}`: not {len} lowercase hex digits")]
    DigestHex {
        /// The digest as given.
        digest: String,
        /// The number of digits its algorithm has.
        len: usize,
    },
    /// A blob does not hash to its digest.
    #[error("blob {digest} is corrupt: its content hashes to {actual}")]
    Corrupt {
        /// The digest the blob is named by.
        digest: String,
        /// The digest of its content.
        actual: String,
    },
    /// A blob is larger than `images.max_blob_mb`.
    #[error("blob {digest} is larger than images.max_blob_mb = {max_mb} MiB")]
    BlobTooLarge {
        /// The blob.
        digest: String,
        /// The limit, in MiB.
        max_mb: u64,
    },
    /// The image's blobs are larger than `images.max_image_mb`.
    #[error("the image's blobs are larger than images.max_image_mb = {max_mb} MiB")]
    ImageTooLarge {
        /// The limit, in MiB.
        max_mb: u64,
    },
    /// A blob cannot be opened or read.
    #[error("blob {digest}: {source}")]
    Blob {
        /// The blob.
        digest: String,
        /// The underlying error.
        source: io::Error,
    },
    /// Reading a blob failed while it was copied.
    #[error("reading blob {digest}: {source}")]
    ReadBlob {
        /// The blob.
        digest: String,
        /// The underlying error.
        source: io::Error,
    },
    /// Writing the agent's copy of a blob failed.
    #[error("copying blob {digest}: {source}")]
    CopyBlob {
        /// The blob.
        digest: String,
        /// The underlying error.
        source: io::Error,
    },
    /// A blob a manifest names is not in the archive.
    #[error("blob {digest} is not in the archive")]
    NotInArchive {
        /// The blob.
        digest: String,
    },
    /// A JSON document (`index.json`, a manifest, a configuration) cannot be read.
    #[error("{what}: {source}")]
    ReadJson {
        /// The document.
        what: String,
        /// The underlying error.
        source: io::Error,
    },
    /// A JSON document is larger than the agent reads.
    #[error("{what}: larger than {max_mb} MiB")]
    JsonTooLarge {
        /// The document.
        what: String,
        /// The limit, in MiB.
        max_mb: u64,
    },
    /// A document is not JSON.
    #[error("{what}: not JSON: {source}")]
    NotJson {
        /// The document.
        what: String,
        /// The parser's error.
        source: serde_json::Error,
    },
    /// A manifest without `layers`.
    #[error("manifest {manifest}: no `layers`")]
    NoLayers {
        /// The manifest's digest.
        manifest: String,
    },
    /// A layer entry of a manifest without a digest.
    #[error("manifest {manifest}: layer {index} has no digest")]
    LayerWithoutDigest {
        /// The manifest's digest.
        manifest: String,
        /// The layer's position in the manifest.
        index: usize,
    },
    /// A layer could not be applied.
    #[error("layer {index} ({digest}): {source}")]
    Layer {
        /// The layer's position in the manifest.
        index: usize,
        /// The layer's digest.
        digest: String,
        /// Why.
        source: LayerError,
    },
    /// Reading an archive, or the tar stream of a directory's copy, failed.
    #[error(transparent)]
    Unpack(#[from] LayerError),
    /// Reading the archive's entries failed.
    #[error("reading the archive: {source}")]
    ReadArchive {
        /// The underlying error.
        source: io::Error,
    },
    /// A directory of the cache cannot be created.
    #[error("creating {}: {source}", path.display())]
    Create {
        /// The directory or file.
        path: PathBuf,
        /// The underlying error.
        source: io::Error,
    },
    /// A file of the image or the cache cannot be read or changed.
    #[error("{}: {source}", path.display())]
    File {
        /// The file.
        path: PathBuf,
        /// The underlying error.
        source: io::Error,
    },
    /// An operation on the image failed.
    #[error("{0}")]
    Io(io::Error),
    /// The cache entry's `image.json` cannot be written.
    #[error("writing image.json: {source}")]
    WriteMeta {
        /// The underlying error.
        source: io::Error,
    },
    /// The unpacked image cannot be moved into the cache.
    #[error("moving the unpacked image to {}: {source}", dest.display())]
    Move {
        /// The cache entry.
        dest: PathBuf,
        /// The underlying error.
        source: io::Error,
    },
    /// A cache entry was removed as it was used.
    #[error("{} vanished", path.display())]
    Vanished {
        /// The cache entry.
        path: PathBuf,
    },
    /// The job user's credentials could not be taken.
    #[error("taking the job user's credentials: {source}")]
    Credentials {
        /// The underlying error.
        source: io::Error,
    },
    /// A rootfs directory nested too deep.
    #[error("`{}`: more than 256 directories deep", rel.display())]
    TooDeep {
        /// The directory, relative to the rootfs.
        rel: PathBuf,
    },
    /// A rootfs directory with more than `images.max_entries` files.
    #[error("the directory has more than images.max_entries = {max} files")]
    TooManyFiles {
        /// The limit.
        max: u64,
    },
}

/// What an image may be, for a reference that cannot be opened.
const OPEN_HINT: &str = "expected \"host\", a rootfs directory, an OCI image layout \
                         directory, or a .tar/.tar.gz of one, that the job's user can read";

impl ImageError {
    pub(super) fn file(path: &Path) -> impl FnOnce(io::Error) -> ImageError + '_ {
        move |source| ImageError::File {
            path: path.to_path_buf(),
            source,
        }
    }

    pub(super) fn create(path: &Path) -> impl FnOnce(io::Error) -> ImageError + '_ {
        move |source| ImageError::Create {
            path: path.to_path_buf(),
            source,
        }
    }
}
