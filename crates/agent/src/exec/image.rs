//! Container images: a rootfs directory, an OCI image layout (a directory with
//! `oci-layout`, `index.json` and `blobs/`) or a `.tar`/`.tar.gz` of one, made into a
//! rootfs in the image cache `<spool>/images/<key>/rootfs`.
//!
//! An image is a user's files, so:
//!
//! * They are opened with the job user's credentials (see `as_user`): a user names only
//!   what they can read themselves. `index.json` and the blobs must be regular files
//!   (no symlink at the end of the path, no FIFO or device: they are opened
//!   non-blocking and checked on the open descriptor).
//! * Every blob is copied into a staging directory of the cache (root's, mode 0700),
//!   hashed while copied, and refused unless it hashes to its digest; a blob's size and
//!   the staged bytes of an image are capped ([`ImagePolicy`]). Nothing is read from
//!   the user's files after that copy. An archive is read as a stream: only its
//!   regular entries `[DIR/]blobs/<algorithm>/<hex>` and `index.json` are taken, and
//!   nothing of it is unpacked on the node.
//! * A cache entry is keyed by the digest of the top manifest (or index), and used only
//!   once the user's copy of that blob was read and verified now: an entry is a function
//!   of those bytes alone, since every blob below is verified when the entry is built.
//!   What a user's `index.json` claims never selects an entry by itself.
//! * A plain directory (no `index.json`) under one of the admin's `images.roots` is used
//!   as the rootfs as it is. Any other directory is copied, with the user's rights, into
//!   the cache (keyed by the SHA-256 of that copy), so that runc never works in a
//!   directory that the user can change meanwhile.
//! * Layers are applied by `layer`: no device node, FIFO, setuid or setgid bit, and no
//!   owner but root comes out of them, within the unpacked-size and entry caps.
//!
//! The cache directory and everything in it belong to root; `<spool>/images` is made
//! 0700, so that no job on the node reaches an image's files except through its own
//! container.

use std::collections::HashMap;
use std::fs::{File, OpenOptions};
use std::io::{self, Read, Write};
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use nix::libc;
use serde_json::Value;
use sha2::Digest;

use super::as_user::{self, ImageUser};
use super::fsutil;
use super::layer::{self, Budget};
use super::ExecError;

mod error;

pub use error::ImageError;

/// A rootfs ready for a container.
#[derive(Debug, Clone)]
pub struct Prepared {
    /// The rootfs directory.
    pub path: PathBuf,
    /// It is the image cache's, shared by attempts: mount an overlay over it.
    pub shared: bool,
    /// The image configuration's `Env` (`K=V`).
    pub env: Vec<String>,
    /// The image configuration's `WorkingDir`.
    pub workdir: Option<String>,
    /// The image configuration's `Entrypoint` (none for a rootfs directory).
    pub entrypoint: Option<Vec<String>>,
}

/// Where images may be used as they are, and how large an image may be: the agent's
/// `[images]` (see `config/agent.toml`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ImagePolicy {
    /// Directories whose rootfs directories are used as they are (the admin vouches
    /// that no user can write them). Empty: every rootfs directory is copied.
    pub roots: Vec<PathBuf>,
    /// Largest blob (a layer as stored, compressed or not), in bytes.
    pub max_blob_bytes: u64,
    /// Largest image: its blobs as stored, or the copy of a rootfs directory, in bytes.
    pub max_image_bytes: u64,
    /// Largest unpacked image: the layers' tar streams as decompressed, and the files'
    /// content, in bytes.
    pub max_unpacked_bytes: u64,
    /// Most entries (files, directories, links) of an unpacked image.
    pub max_entries: u64,
}

/// The defaults of the agent's `[images]` limits.
pub mod defaults {
    /// `images.max_blob_mb`: 16 GiB.
    pub const MAX_BLOB_MB: u64 = 16 << 10;
    /// `images.max_image_mb`: 64 GiB.
    pub const MAX_IMAGE_MB: u64 = 64 << 10;
    /// `images.max_unpacked_mb`: 128 GiB.
    pub const MAX_UNPACKED_MB: u64 = 128 << 10;
    /// `images.max_entries`.
    pub const MAX_ENTRIES: u64 = 2_000_000;
}

impl Default for ImagePolicy {
    fn default() -> ImagePolicy {
        ImagePolicy {
            roots: Vec::new(),
            max_blob_bytes: defaults::MAX_BLOB_MB << 20,
            max_image_bytes: defaults::MAX_IMAGE_MB << 20,
            max_unpacked_bytes: defaults::MAX_UNPACKED_MB << 20,
            max_entries: defaults::MAX_ENTRIES,
        }
    }
}

/// The largest `index.json`, manifest or image configuration read.
const MAX_JSON: u64 = 4 << 20;

/// The version of the cache entries' layout; an entry of another version (an older
/// agent's, unpacked with fewer checks) is never used, and is replaced when built
/// again.
const CACHE_FORMAT: u64 = 2;

/// A list of strings in an image configuration (`Env`, `Entrypoint`); `None` where it
/// is absent or empty.
fn strings(v: &Value) -> Option<Vec<String>> {
    let list: Vec<String> = v
        .as_array()?
        .iter()
        .filter_map(|v| v.as_str().map(str::to_string))
        .collect();
    (!list.is_empty()).then_some(list)
}

const INDEX_TYPES: &[&str] = &[
    "application/vnd.oci.image.index.v1+json",
    "application/vnd.docker.distribution.manifest.list.v2+json",
];

/// Resolves `image` into a rootfs for a job of `who` (the agent's own credentials where
/// `None`), unpacking or copying it into the cache under `images` where needed.
pub fn prepare(
    images: &Path,
    policy: &ImagePolicy,
    image: &str,
    who: Option<&ImageUser>,
) -> Result<Prepared, ExecError> {
    let err = |reason: ImageError| ExecError::Image {
        image: image.to_string(),
        reason,
    };
    fsutil::private_dir(images)?;
    let p = Path::new(image);
    let f = as_user::open(who, None, p, false).map_err(|source| {
        err(if source.kind() == io::ErrorKind::NotFound {
            ImageError::NotFound { source }
        } else {
            ImageError::Unreadable { source }
        })
    })?;
    let kind = f
        .metadata()
        .map_err(|e| err(ImageError::Io(e)))?
        .file_type();
    if kind.is_dir() {
        match as_user::open_regular(who, Some(&f), Path::new("index.json")) {
            Ok(index) => {
                let mut src = Source::Layout { who, dir: f };
                from_index(images, policy, &mut src, index, "index.json").map_err(err)
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                if let Some(dir) = under_roots(policy, p, who) {
                    return Ok(Prepared {
                        path: dir,
                        shared: false,
                        env: Vec::new(),
                        workdir: None,
                        entrypoint: None,
                    });
                }
                from_directory(images, policy, p, who).map_err(err)
            }
            Err(source) => Err(err(ImageError::Index { source })),
        }
    } else if kind.is_file() {
        let f = as_user::blocking(f).map_err(|e| err(ImageError::Io(e)))?;
        from_archive(images, policy, f).map_err(err)
    } else {
        Err(err(ImageError::NotFileOrDir {
            kind: as_user::kind_name(&kind),
        }))
    }
}

/// The directory `p` resolves to (with `who`'s rights), if it lies under one of the
/// policy's roots.
fn under_roots(policy: &ImagePolicy, p: &Path, who: Option<&ImageUser>) -> Option<PathBuf> {
    if policy.roots.is_empty() {
        return None;
    }
    let real = as_user::run_as(who, || p.canonicalize()).ok()?.ok()?;
    policy
        .roots
        .iter()
        .filter_map(|r| r.canonicalize().ok())
        .any(|r| real.starts_with(r))
        .then_some(real)
}

/// A content descriptor.
#[derive(Debug, Clone)]
struct Desc {
    media_type: String,
    digest: String,
}

fn host_arch() -> &'static str {
    match std::env::consts::ARCH {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        "powerpc64" => "ppc64le",
        a => a,
    }
}
/// Picks the manifest for this node from an index: the only one, or the one for
/// `linux/<arch>`.
fn choose(index: &Value, what: &str) -> Result<Desc, ImageError> {
    let list = index["manifests"]
        .as_array()
        .filter(|l| !l.is_empty())
        .ok_or_else(|| ImageError::NoManifests {
            what: what.to_string(),
        })?;
    let arch = host_arch();
    let fits = |m: &&Value| {
        let p = &m["platform"];
        let attestation = m["annotations"]["vnd.docker.reference.type"] == "attestation-manifest";
        !attestation
            && (p.is_null() || (p["os"] == "linux" && p["architecture"].as_str() == Some(arch)))
    };
    let m = list.iter().find(fits).ok_or_else(|| {
        let platforms: Vec<String> = list
            .iter()
            .map(|m| {
                format!(
                    "{}/{}",
                    m["platform"]["os"].as_str().unwrap_or("?"),
                    m["platform"]["architecture"].as_str().unwrap_or("?")
                )
            })
            .collect();
        ImageError::NoPlatform {
            what: what.to_string(),
            arch,
            platforms: platforms.join(", "),
        }
    })?;
    Ok(Desc {
        media_type: m["mediaType"].as_str().unwrap_or("").to_string(),
        digest: m["digest"]
            .as_str()
            .ok_or_else(|| ImageError::EntryWithoutDigest {
                what: what.to_string(),
            })?
            .to_string(),
    })
}

/// `(algorithm, hex)` of a digest, validated so it can name a file.
fn split_digest(digest: &str) -> Result<(&str, &str), ImageError> {
    let (algo, hex) = digest
        .split_once(':')
        .ok_or_else(|| ImageError::DigestForm {
            digest: digest.to_string(),
        })?;
    let len = match algo {
        "sha256" => 64,
        "sha512" => 128,
        _ => {
            return Err(ImageError::DigestAlgorithm {
                digest: digest.to_string(),
                algorithm: algo.to_string(),
            })
        }
    };
    if hex.len() != len || !hex.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')) {
        return Err(ImageError::DigestHex {
            digest: digest.to_string(),
            len,
        });
    }
    Ok((algo, hex))
}

fn cache_key(digest: &str) -> Result<String, ImageError> {
    let (a, h) = split_digest(digest)?;
    Ok(format!("{a}-{h}"))
}

/// A hasher of one of the digests' algorithms.
enum Hasher {
    Sha256(sha2::Sha256),
    Sha512(sha2::Sha512),
}

impl Hasher {
    fn new(algo: &str) -> Hasher {
        if algo == "sha512" {
            Hasher::Sha512(sha2::Sha512::new())
        } else {
            Hasher::Sha256(sha2::Sha256::new())
        }
    }

    fn update(&mut self, b: &[u8]) {
        match self {
            Hasher::Sha256(h) => h.update(b),
            Hasher::Sha512(h) => h.update(b),
        }
    }

    fn hex(self) -> String {
        let bytes = match self {
            Hasher::Sha256(h) => h.finalize().to_vec(),
            Hasher::Sha512(h) => h.finalize().to_vec(),
        };
        bytes.iter().map(|b| format!("{b:02x}")).collect()
    }
}

/// The agent's copies of an image's blobs, verified, in a directory of the cache that
/// only root can enter; removed when dropped.
struct Staging {
    dir: PathBuf,
    /// Digest → its verified copy.
    blobs: HashMap<String, PathBuf>,
    /// Bytes staged so far.
    total: u64,
}

impl Staging {
    fn new(images: &Path) -> Result<Staging, ImageError> {
        let dir = images.join(format!(
            ".staging-{}-{}",
            std::process::id(),
            fsutil::now_nanos()
        ));
        std::fs::DirBuilder::new()
            .mode(0o700)
            .create(&dir)
            .map_err(ImageError::create(&dir))?;
        Ok(Staging {
            dir,
            blobs: HashMap::new(),
            total: 0,
        })
    }

    /// A new file of the staging area, only the agent's.
    fn create(&self, name: &str) -> Result<(PathBuf, File), ImageError> {
        let path = self.dir.join(name);
        let f = OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .open(&path)
            .map_err(ImageError::create(&path))?;
        Ok((path, f))
    }

    /// Copies blob `digest` from `r` (at most `size_hint` bytes where the archive's
    /// header says so), hashing it; refused unless it hashes to `digest` and fits the
    /// policy's caps.
    fn copy_blob(
        &mut self,
        policy: &ImagePolicy,
        digest: &str,
        r: &mut dyn Read,
    ) -> Result<PathBuf, ImageError> {
        if let Some(p) = self.blobs.get(digest) {
            return Ok(p.clone());
        }
        let (algo, hex) = split_digest(digest)?;
        let (path, mut f) = self.create(&format!("{algo}-{hex}"))?;
        let mut h = Hasher::new(algo);
        let mut buf = vec![0u8; 1 << 20];
        let mut size = 0u64;
        let res = (|| {
            loop {
                let n = r.read(&mut buf).map_err(|source| ImageError::ReadBlob {
                    digest: digest.to_string(),
                    source,
                })?;
                if n == 0 {
                    break;
                }
                size += n as u64;
                if size > policy.max_blob_bytes {
                    return Err(ImageError::BlobTooLarge {
                        digest: digest.to_string(),
                        max_mb: policy.max_blob_bytes >> 20,
                    });
                }
                if self.total + size > policy.max_image_bytes {
                    return Err(ImageError::ImageTooLarge {
                        max_mb: policy.max_image_bytes >> 20,
                    });
                }
                h.update(&buf[..n]);
                f.write_all(&buf[..n])
                    .map_err(|source| ImageError::CopyBlob {
                        digest: digest.to_string(),
                        source,
                    })?;
            }
            let actual = h.hex();
            if actual != hex {
                return Err(ImageError::Corrupt {
                    digest: digest.to_string(),
                    actual: format!("{algo}:{actual}"),
                });
            }
            Ok(())
        })();
        if let Err(e) = res {
            let _ = std::fs::remove_file(&path);
            return Err(e);
        }
        self.total += size;
        self.blobs.insert(digest.to_string(), path.clone());
        Ok(path)
    }

    /// Frees the copy of a blob no longer needed (a layer once applied).
    fn forget(&mut self, digest: &str) {
        if let Some(p) = self.blobs.remove(digest) {
            let _ = std::fs::remove_file(p);
        }
    }
}

impl Drop for Staging {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Reads JSON of at most [`MAX_JSON`] bytes.
fn read_json(r: impl Read, what: &str) -> Result<Value, ImageError> {
    let mut text = Vec::new();
    r.take(MAX_JSON + 1)
        .read_to_end(&mut text)
        .map_err(|source| ImageError::ReadJson {
            what: what.to_string(),
            source,
        })?;
    if text.len() as u64 > MAX_JSON {
        return Err(ImageError::JsonTooLarge {
            what: what.to_string(),
            max_mb: MAX_JSON >> 20,
        });
    }
    serde_json::from_slice(&text).map_err(|source| ImageError::NotJson {
        what: what.to_string(),
        source,
    })
}

/// Where an image's blobs come from.
enum Source<'a> {
    /// A layout directory, opened with the user's rights.
    Layout {
        who: Option<&'a ImageUser>,
        dir: File,
    },
    /// An archive, opened with the user's rights; `complete` once every blob of it has
    /// been staged.
    Archive { file: File, complete: bool },
}

impl Source<'_> {
    /// The verified copy of blob `digest`.
    fn stage(
        &mut self,
        staging: &mut Staging,
        policy: &ImagePolicy,
        digest: &str,
    ) -> Result<PathBuf, ImageError> {
        if let Some(p) = staging.blobs.get(digest) {
            return Ok(p.clone());
        }
        let (algo, hex) = split_digest(digest)?;
        match self {
            Source::Layout { who, dir } => {
                let rel = Path::new("blobs").join(algo).join(hex);
                let mut f = as_user::open_regular(*who, Some(dir), &rel).map_err(|source| {
                    ImageError::Blob {
                        digest: digest.to_string(),
                        source,
                    }
                })?;
                staging.copy_blob(policy, digest, &mut f)
            }
            Source::Archive { file, complete } => {
                if !*complete {
                    scan_archive(file, staging, policy, u64::MAX)?;
                    *complete = true;
                }
                staging
                    .blobs
                    .get(digest)
                    .cloned()
                    .ok_or_else(|| ImageError::NotInArchive {
                        digest: digest.to_string(),
                    })
            }
        }
    }

    fn read_json(
        &mut self,
        staging: &mut Staging,
        policy: &ImagePolicy,
        digest: &str,
    ) -> Result<Value, ImageError> {
        let path = self.stage(staging, policy, digest)?;
        let f = File::open(&path).map_err(|source| ImageError::Blob {
            digest: digest.to_string(),
            source,
        })?;
        read_json(f, &format!("blob {digest}"))
    }
}

/// The cache entry for an image whose `index.json` is `index`.
fn from_index(
    images: &Path,
    policy: &ImagePolicy,
    src: &mut Source,
    index: File,
    what: &str,
) -> Result<Prepared, ImageError> {
    let index = read_json(index, what)?;
    let mut staging = Staging::new(images)?;
    let top = choose(&index, what)?;
    let key = cache_key(&top.digest)?;
    // The claimed digest selects an entry only once the blob was read and verified.
    let manifest = src.read_json(&mut staging, policy, &top.digest)?;
    if let Some(p) = cached(images, &key) {
        return Ok(p);
    }
    build(images, policy, src, &mut staging, top, manifest, &key)
}

/// A finished cache entry of this agent's format (a finished entry is renamed into
/// place whole).
fn cached(images: &Path, key: &str) -> Option<Prepared> {
    let dir = images.join(key);
    let rootfs = dir.join("rootfs");
    let meta: Value =
        fsutil::read_string(&dir.join("image.json")).and_then(|t| serde_json::from_str(&t).ok())?;
    if meta["format"].as_u64() != Some(CACHE_FORMAT) || !rootfs.is_dir() {
        return None;
    }
    Some(Prepared {
        path: rootfs,
        shared: true,
        env: strings(&meta["env"]).unwrap_or_default(),
        workdir: meta["workdir"].as_str().map(str::to_string),
        entrypoint: strings(&meta["entrypoint"]),
    })
}

/// The image's configuration: `Env`, `WorkingDir`, `Entrypoint`.
#[derive(Default)]
struct ImageConfig {
    env: Vec<String>,
    workdir: Option<String>,
    entrypoint: Option<Vec<String>>,
}

#[allow(clippy::too_many_arguments)]
fn build(
    images: &Path,
    policy: &ImagePolicy,
    src: &mut Source,
    staging: &mut Staging,
    top: Desc,
    mut manifest: Value,
    key: &str,
) -> Result<Prepared, ImageError> {
    // Follow nested indexes down to the image manifest.
    let mut desc = top;
    for _ in 0..4 {
        let is_index = INDEX_TYPES.contains(&desc.media_type.as_str())
            || manifest["mediaType"]
                .as_str()
                .is_some_and(|t| INDEX_TYPES.contains(&t))
            || (manifest["manifests"].is_array() && !manifest["layers"].is_array());
        if !is_index {
            break;
        }
        desc = choose(&manifest, &format!("index {}", desc.digest))?;
        manifest = src.read_json(staging, policy, &desc.digest)?;
    }
    let layers = manifest["layers"]
        .as_array()
        .ok_or_else(|| ImageError::NoLayers {
            manifest: desc.digest.clone(),
        })?
        .clone();
    let mut config = ImageConfig::default();
    if let Some(cd) = manifest["config"]["digest"].as_str() {
        let c = src.read_json(staging, policy, cd)?;
        config.env = strings(&c["config"]["Env"]).unwrap_or_default();
        config.entrypoint = strings(&c["config"]["Entrypoint"]);
        config.workdir = c["config"]["WorkingDir"]
            .as_str()
            .filter(|w| !w.is_empty())
            .map(str::to_string);
    }
    let mut digests = Vec::new();
    for (i, l) in layers.iter().enumerate() {
        let digest = l["digest"]
            .as_str()
            .ok_or_else(|| ImageError::LayerWithoutDigest {
                manifest: desc.digest.clone(),
                index: i,
            })?;
        split_digest(digest)?;
        digests.push(digest.to_string());
    }
    let mut budget = Budget::new(policy.max_unpacked_bytes, policy.max_entries);
    install(images, key, &desc.digest, &config, |rootfs| {
        for (i, digest) in digests.iter().enumerate() {
            let path = src.stage(staging, policy, digest)?;
            layer::apply_layer(rootfs, &path, &mut budget).map_err(|source| ImageError::Layer {
                index: i,
                digest: digest.clone(),
                source,
            })?;
            staging.forget(digest);
        }
        Ok(())
    })
}

/// Builds cache entry `key` in a temporary directory of the cache with `fill` (given
/// the new rootfs), records `config`, and renames it into place; an entry of another
/// format there is replaced, one of this format (another start built it meanwhile) is
/// used.
fn install(
    images: &Path,
    key: &str,
    from: &str,
    config: &ImageConfig,
    fill: impl FnOnce(&Path) -> Result<(), ImageError>,
) -> Result<Prepared, ImageError> {
    let tmp = images.join(format!(
        ".tmp-{key}-{}-{}",
        std::process::id(),
        fsutil::now_nanos()
    ));
    let rootfs = tmp.join("rootfs");
    let res = (|| -> Result<(), ImageError> {
        std::fs::DirBuilder::new()
            .mode(0o700)
            .create(&tmp)
            .map_err(ImageError::create(&tmp))?;
        std::fs::create_dir(&rootfs).map_err(ImageError::create(&rootfs))?;
        std::fs::set_permissions(&rootfs, std::fs::Permissions::from_mode(0o755))
            .map_err(ImageError::file(&rootfs))?;
        fill(&rootfs)?;
        let meta = serde_json::json!({"format": CACHE_FORMAT, "from": from, "env": config.env,
                                      "workdir": config.workdir, "entrypoint": config.entrypoint});
        std::fs::write(tmp.join("image.json"), meta.to_string())
            .map_err(|source| ImageError::WriteMeta { source })
    })();
    if let Err(e) = res {
        let _ = std::fs::remove_dir_all(&tmp);
        return Err(e);
    }
    let dest = images.join(key);
    if cached(images, key).is_none() && std::fs::symlink_metadata(&dest).is_ok() {
        // An entry of an older format: out of the way, then gone.
        let old = images.join(format!(".old-{key}-{}", fsutil::now_nanos()));
        if std::fs::rename(&dest, &old).is_ok() {
            let _ = std::fs::remove_dir_all(&old);
        }
    }
    if let Err(e) = std::fs::rename(&tmp, &dest) {
        let _ = std::fs::remove_dir_all(&tmp);
        if cached(images, key).is_none() {
            return Err(ImageError::Move { dest, source: e });
        }
        // Another start unpacked the same image meanwhile: use theirs.
    }
    cached(images, key).ok_or(ImageError::Vanished { path: dest })
}

/// A regular entry `[DIR/]blobs/<algorithm>/<hex>` of an archive: its digest.
fn archive_blob(rel: &Path) -> Option<String> {
    let parts: Vec<&str> = rel.iter().map(|c| c.to_str()).collect::<Option<_>>()?;
    let n = parts.len();
    if !(3..=4).contains(&n) || parts[n - 3] != "blobs" {
        return None;
    }
    let digest = format!("{}:{}", parts[n - 2], parts[n - 1]);
    split_digest(&digest).ok()?;
    Some(digest)
}

/// Reads the archive `file` from its start as a stream, staging (verified) each blob
/// of at most `max` bytes not staged yet; returns its `index.json` (top level, or one
/// directory down), if it has one. Links and every other kind of entry are ignored.
fn scan_archive(
    file: &File,
    staging: &mut Staging,
    policy: &ImagePolicy,
    max: u64,
) -> Result<Option<Value>, ImageError> {
    let f = file.try_clone().map_err(ImageError::Io)?;
    let too_big = format!(
        "the archive is larger than images.max_image_mb = {} MiB",
        policy.max_image_bytes >> 20
    );
    let mut ar = tar::Archive::new(layer::open_maybe_gz(
        f,
        policy.max_image_bytes.saturating_add(MAX_JSON),
        too_big,
    )?);
    let mut index = None;
    for e in ar
        .entries()
        .map_err(|source| ImageError::ReadArchive { source })?
    {
        let mut e = e.map_err(|source| ImageError::ReadArchive { source })?;
        if !matches!(
            e.header().entry_type(),
            tar::EntryType::Regular | tar::EntryType::Continuous
        ) {
            continue;
        }
        let path = e.path().map_err(ImageError::Io)?.into_owned();
        let Some(rel) = layer::clean(&path)? else {
            continue;
        };
        if index.is_none()
            && rel.file_name().is_some_and(|n| n == "index.json")
            && rel.components().count() <= 2
        {
            index = Some(read_json(&mut e, "index.json")?);
        } else if let Some(digest) = archive_blob(&rel) {
            if e.header().size().unwrap_or(u64::MAX) <= max {
                staging.copy_blob(policy, &digest, &mut e)?;
            }
        }
    }
    Ok(index)
}

/// The cache entry for an archive of an OCI image layout. A first pass takes its
/// `index.json` and small blobs (manifests, configurations), enough to verify the top
/// digest and find a cached entry; only an image to unpack reads it again for the rest.
fn from_archive(images: &Path, policy: &ImagePolicy, file: File) -> Result<Prepared, ImageError> {
    let mut staging = Staging::new(images)?;
    let index = scan_archive(&file, &mut staging, policy, MAX_JSON)?.ok_or(ImageError::NoIndex)?;
    let top = choose(&index, "index.json")?;
    let key = cache_key(&top.digest)?;
    let mut src = Source::Archive {
        file,
        complete: false,
    };
    let manifest = src.read_json(&mut staging, policy, &top.digest)?;
    if let Some(p) = cached(images, &key) {
        return Ok(p);
    }
    build(images, policy, &mut src, &mut staging, top, manifest, &key)
}

/// The cache entry for a rootfs directory not under the policy's roots: a copy of it,
/// read with the user's rights into a tar stream in the staging area, then unpacked as
/// a layer is.
fn from_directory(
    images: &Path,
    policy: &ImagePolicy,
    dir: &Path,
    who: Option<&ImageUser>,
) -> Result<Prepared, ImageError> {
    let staging = Staging::new(images)?;
    let (tar_path, file) = staging.create("rootfs.tar")?;
    let mut out = HashingWriter {
        inner: file,
        hash: sha2::Sha256::new(),
        written: 0,
        max: policy.max_image_bytes,
    };
    as_user::run_as(who, || -> Result<(), ImageError> {
        let mut b = tar::Builder::new(&mut out);
        let mut entries = 0u64;
        walk(&mut b, dir, Path::new(""), policy, &mut entries, 0)?;
        b.finish().map_err(ImageError::Io)
    })
    .map_err(|source| ImageError::Credentials { source })??;
    let hex: String = out
        .hash
        .finalize()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    let key = format!("tree-sha256-{hex}");
    if let Some(p) = cached(images, &key) {
        return Ok(p);
    }
    let mut budget = Budget::new(policy.max_unpacked_bytes, policy.max_entries);
    let from = format!("directory {}", dir.display());
    install(images, &key, &from, &ImageConfig::default(), |rootfs| {
        Ok(layer::apply_layer(rootfs, &tar_path, &mut budget)?)
    })
}

/// A file being written and hashed, failing past `max` bytes.
struct HashingWriter {
    inner: File,
    hash: sha2::Sha256,
    written: u64,
    max: u64,
}

impl Write for HashingWriter {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        if self.written + buf.len() as u64 > self.max {
            return Err(io::Error::other(format!(
                "the directory is larger than images.max_image_mb = {} MiB",
                self.max >> 20
            )));
        }
        let n = self.inner.write(buf)?;
        self.hash.update(&buf[..n]);
        self.written += n as u64;
        Ok(n)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.inner.flush()
    }
}

/// Appends directory `root/rel`'s entries (sorted, so that the same tree gives the same
/// stream) to `b`: directories, regular files and symlinks, owned by root; FIFOs,
/// sockets and devices are left out. Runs with the job user's credentials.
fn walk(
    b: &mut tar::Builder<&mut HashingWriter>,
    root: &Path,
    rel: &Path,
    policy: &ImagePolicy,
    entries: &mut u64,
    depth: u32,
) -> Result<(), ImageError> {
    if depth > 256 {
        return Err(ImageError::TooDeep {
            rel: rel.to_path_buf(),
        });
    }
    let here = root.join(rel);
    let mut names: Vec<_> = std::fs::read_dir(&here)
        .map_err(ImageError::file(&here))?
        .map(|e| e.map(|e| e.file_name()))
        .collect::<Result<_, _>>()
        .map_err(ImageError::file(&here))?;
    names.sort();
    for name in names {
        *entries += 1;
        if *entries > policy.max_entries {
            return Err(ImageError::TooManyFiles {
                max: policy.max_entries,
            });
        }
        let r = rel.join(&name);
        let p = root.join(&r);
        let ctx = |source: io::Error| ImageError::File {
            path: p.clone(),
            source,
        };
        let m = std::fs::symlink_metadata(&p).map_err(ctx)?;
        let mut h = tar::Header::new_gnu();
        h.set_uid(0);
        h.set_gid(0);
        h.set_mtime(u64::try_from(m.mtime()).unwrap_or(0));
        h.set_mode(m.mode() & 0o7777);
        h.set_size(0);
        let t = m.file_type();
        if t.is_dir() {
            h.set_entry_type(tar::EntryType::Directory);
            b.append_data(&mut h, &r, io::empty()).map_err(ctx)?;
            walk(b, root, &r, policy, entries, depth + 1)?;
        } else if t.is_symlink() {
            let target = std::fs::read_link(&p).map_err(ctx)?;
            h.set_entry_type(tar::EntryType::Symlink);
            b.append_link(&mut h, &r, &target).map_err(ctx)?;
        } else if t.is_file() {
            // Opened without following a symlink and checked again on the descriptor:
            // the user may have swapped it since.
            let f = as_user::open_regular(None, None, &p).map_err(ctx)?;
            let m = f.metadata().map_err(ctx)?;
            h.set_entry_type(tar::EntryType::Regular);
            h.set_size(m.len());
            h.set_mode(m.mode() & 0o7777);
            b.append_data(&mut h, &r, ExactLen { f, left: m.len() })
                .map_err(ctx)?;
        }
    }
    Ok(())
}

/// A file's first `left` bytes, an error where it is shorter now (it shrank while read).
struct ExactLen {
    f: File,
    left: u64,
}

impl Read for ExactLen {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if self.left == 0 {
            return Ok(0);
        }
        let max = buf
            .len()
            .min(usize::try_from(self.left).unwrap_or(usize::MAX));
        let n = self.f.read(&mut buf[..max])?;
        if n == 0 {
            return Err(io::Error::other("the file shrank while it was copied"));
        }
        self.left -= n as u64;
        Ok(n)
    }
}

#[cfg(test)]
mod tests {
    use super::layer::{apply_layer, clean, resolve_in_root, LayerError};
    use super::*;

    fn budget() -> Budget {
        Budget::new(1 << 30, 100_000)
    }

    fn layer(entries: &[(&str, Option<&[u8]>)]) -> Vec<u8> {
        let mut b = tar::Builder::new(Vec::new());
        for (path, data) in entries {
            let mut h = tar::Header::new_gnu();
            h.set_uid(0);
            h.set_gid(0);
            h.set_mtime(1_700_000_000);
            match data {
                Some(d) => {
                    h.set_entry_type(tar::EntryType::Regular);
                    h.set_size(d.len() as u64);
                    h.set_mode(0o644);
                    b.append_data(&mut h, path, *d).unwrap();
                }
                None => {
                    h.set_entry_type(tar::EntryType::Directory);
                    h.set_size(0);
                    h.set_mode(0o755);
                    b.append_data(&mut h, path, &[][..]).unwrap();
                }
            }
        }
        b.into_inner().unwrap()
    }

    #[test]
    fn whiteouts_and_opaque_dirs() {
        let t = tempfile::tempdir().unwrap();
        let root = t.path().join("rootfs");
        std::fs::create_dir(&root).unwrap();
        let l1 = t.path().join("l1");
        std::fs::write(
            &l1,
            layer(&[
                ("etc", None),
                ("etc/a", Some(b"a")),
                ("etc/b", Some(b"b")),
                ("opt", None),
                ("opt/x", Some(b"x")),
                ("opt/sub", None),
                ("opt/sub/y", Some(b"y")),
            ]),
        )
        .unwrap();
        apply_layer(&root, &l1, &mut budget()).unwrap();
        // The opaque marker comes after the layer's own file in the same directory.
        let l2 = t.path().join("l2");
        std::fs::write(
            &l2,
            layer(&[
                ("etc/.wh.a", Some(b"")),
                ("opt/new", Some(b"n")),
                ("opt/.wh..wh..opq", Some(b"")),
                ("etc/c", Some(b"c")),
            ]),
        )
        .unwrap();
        apply_layer(&root, &l2, &mut budget()).unwrap();
        assert!(!root.join("etc/a").exists());
        assert_eq!(std::fs::read(root.join("etc/b")).unwrap(), b"b");
        assert_eq!(std::fs::read(root.join("etc/c")).unwrap(), b"c");
        assert!(!root.join("opt/x").exists());
        assert!(!root.join("opt/sub").exists());
        assert_eq!(std::fs::read(root.join("opt/new")).unwrap(), b"n");
        assert!(!root.join("etc/.wh.a").exists());
    }

    #[test]
    fn symlinks_resolve_inside_the_root() {
        let t = tempfile::tempdir().unwrap();
        let root = t.path().join("rootfs");
        let outside = t.path().join("outside");
        std::fs::create_dir_all(root.join("usr/lib")).unwrap();
        std::fs::create_dir(&outside).unwrap();
        std::fs::write(outside.join("victim"), b"v").unwrap();
        // An absolute symlink points into the rootfs, not at the node's file system.
        std::os::unix::fs::symlink("/usr/lib", root.join("lib")).unwrap();
        std::os::unix::fs::symlink(&outside, root.join("escape")).unwrap();
        let got = resolve_in_root(&root, Path::new("lib/x"), true, false).unwrap();
        assert_eq!(got, root.join("usr/lib/x"));
        let got = resolve_in_root(&root, Path::new("escape/victim"), true, false).unwrap();
        assert!(got.starts_with(&root), "{}", got.display());
        let got = resolve_in_root(&root, Path::new("../../etc"), true, false).unwrap();
        assert_eq!(got, root.join("etc"));
        assert!(clean(Path::new("a/../../b")).is_err());
    }

    #[test]
    fn errors_tell_their_kind() {
        let t = tempfile::tempdir().unwrap();
        let images = t.path().join("images");
        let policy = ImagePolicy::default();
        let missing = t.path().join("no-such-image");
        let e = prepare(&images, &policy, missing.to_str().unwrap(), None).unwrap_err();
        match &e {
            ExecError::Image {
                reason: ImageError::NotFound { source },
                ..
            } => assert_eq!(source.kind(), io::ErrorKind::NotFound),
            other => panic!("{other:?}"),
        }
        assert!(
            e.to_string().contains("that the job's user can read"),
            "{e}"
        );
        let archive = t.path().join("empty.tar");
        std::fs::write(
            &archive,
            tar::Builder::new(Vec::new()).into_inner().unwrap(),
        )
        .unwrap();
        let e = prepare(&images, &policy, archive.to_str().unwrap(), None).unwrap_err();
        assert!(
            matches!(
                e,
                ExecError::Image {
                    reason: ImageError::NoIndex,
                    ..
                }
            ),
            "{e}"
        );
        assert!(matches!(
            split_digest("sha256"),
            Err(ImageError::DigestForm { .. })
        ));
        assert!(matches!(
            split_digest("md5:abc"),
            Err(ImageError::DigestAlgorithm { algorithm, .. }) if algorithm == "md5"
        ));
        assert!(matches!(
            split_digest("sha256:ABC"),
            Err(ImageError::DigestHex { len: 64, .. })
        ));
        assert!(matches!(
            clean(Path::new("a/../../b")),
            Err(LayerError::LeavesRoot { .. })
        ));
    }

    #[test]
    fn digests_are_checked() {
        assert!(split_digest("sha256:../../etc").is_err());
        assert!(split_digest("md5:abc").is_err());
        let t = tempfile::tempdir().unwrap();
        let mut staging = Staging::new(t.path()).unwrap();
        let policy = ImagePolicy::default();
        let hex = "2cf24dba5fb0a30e26e83b2ac5b9e29e1b161e5c1fa7425e73043362938b9824"; // "hello"
        let d = format!("sha256:{hex}");
        let e = staging
            .copy_blob(&policy, &d, &mut &b"hellO"[..])
            .unwrap_err();
        assert!(
            matches!(&e, ImageError::Corrupt { digest, .. } if *digest == d),
            "{e}"
        );
        assert!(e.to_string().contains("corrupt"), "{e}");
        let p = staging.copy_blob(&policy, &d, &mut &b"hello"[..]).unwrap();
        assert_eq!(std::fs::read(p).unwrap(), b"hello");
        let small = ImagePolicy {
            max_blob_bytes: 4,
            ..ImagePolicy::default()
        };
        staging.forget(&d);
        let e = staging
            .copy_blob(&small, &d, &mut &b"hello"[..])
            .unwrap_err();
        assert!(
            matches!(e, ImageError::BlobTooLarge { max_mb: 0, .. }),
            "{e}"
        );
        assert!(e.to_string().contains("images.max_blob_mb"), "{e}");
    }
}
