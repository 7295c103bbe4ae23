//! Job output outside the spool: Slurm's `--output`/`--error` file patterns, the files
//! the shim creates for them as the job's user, and reading them back for `tranche logs`.
//!
//! The agent never touches such a file with its own (root) rights. The shim creates
//! it with the user's uid, gid and groups, so a path the user could not write (into
//! `/root`, or a symlink to `/etc/shadow`) fails the attempt instead of being written.
//! The shim records which file it gave the job (device, inode, owner: `outputs.json`
//! in the attempt directory, kept beside the spool's logs afterwards), and the log port
//! reads a path only while it still leads to that very file: a user who replaces it by
//! a link to a file it may not read gets an error, never that file.

use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use nix::libc;
use nix::unistd::{Gid, Uid};
use serde::{Deserialize, Serialize};
use tranche_model::JobId;

/// What `%a` is for a job that is no task of an array: Slurm's `NO_VAL`, so that
/// scripts which parse the names find what they find under Slurm.
pub const NO_TASK: u32 = 4_294_967_294;

/// Slurm caps a field's zero-padding (`%3a`) at 10 digits; so does Tranche.
const MAX_WIDTH: usize = 10;

/// What the fields of an output pattern stand for, for one attempt on this node.
#[derive(Debug, Clone)]
pub struct PatternFields<'a> {
    /// `%j`.
    pub job: JobId,
    /// `%A` and `%a`: the array's id and this task's index, for a task of an array;
    /// otherwise `%A` is the job's id and `%a` is [`NO_TASK`].
    pub array: Option<(JobId, u32)>,
    /// `%x`: the job's name.
    pub name: &'a str,
    /// `%u`: the account the job runs as on this node.
    pub user: &'a str,
    /// `%N`: this node's name.
    pub node: &'a str,
    /// `%n`: this node's rank in the job, from 0.
    pub rank: u32,
}

/// Why an `--output`/`--error` pattern cannot be used. The message names the option,
/// the pattern and the rule.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("--{option} pattern `{pattern}`: {reason}")]
pub struct PatternError {
    /// `output` or `error`.
    pub option: &'static str,
    pub pattern: String,
    pub reason: ExpandError,
}

/// Why a pattern does not expand into a path (the `reason` of a [`PatternError`]).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ExpandError {
    /// A `%` sequence that is no field.
    #[error("`%{sequence}` is not a field; use {FIELDS}")]
    NotAField {
        /// The sequence after the `%` (a width, then one character).
        sequence: String,
    },
    /// The pattern ends in `%`, maybe with a width.
    #[error("it ends in a lone `%{width}`; use {FIELDS}")]
    LonePercent {
        /// The width given, maybe empty.
        width: String,
    },
    /// Nothing is left once expanded.
    #[error("it expands to an empty path")]
    Empty,
    /// A field brings a NUL byte.
    #[error("it contains a NUL byte")]
    Nul,
}

const FIELDS: &str = "%j (job id), %A (array id), %a (task index), %x (job name), \
                      %u (user), %N (node name), %n (node rank) or %% (a literal %)";

/// Expands Slurm's fields in `pattern`: `%j`, `%A`, `%a`, `%x`, `%u`, `%N`, `%n` and
/// `%%`. A number between `%` and the letter zero-pads a numeric field to that many
/// digits (at most 10) and is ignored for the others, as in Slurm. Any other `%`
/// sequence is an error (the reason, without the pattern).
pub fn expand(pattern: &str, f: &PatternFields) -> Result<String, ExpandError> {
    let mut out = String::with_capacity(pattern.len() + 16);
    let mut chars = pattern.chars().peekable();
    while let Some(c) = chars.next() {
        if c != '%' {
            out.push(c);
            continue;
        }
        let mut digits = String::new();
        while let Some(d) = chars.next_if(char::is_ascii_digit) {
            digits.push(d);
        }
        let width = digits.parse::<usize>().unwrap_or(0).min(MAX_WIDTH);
        let number = |n: u64| format!("{n:0width$}");
        match chars.next() {
            Some('%') if digits.is_empty() => out.push('%'),
            Some('j') => out.push_str(&number(f.job.0)),
            Some('A') => out.push_str(&number(f.array.map_or(f.job, |a| a.0).0)),
            Some('a') => out.push_str(&number(u64::from(f.array.map_or(NO_TASK, |a| a.1)))),
            Some('n') => out.push_str(&number(u64::from(f.rank))),
            Some('x') => out.push_str(f.name),
            Some('u') => out.push_str(f.user),
            Some('N') => out.push_str(f.node),
            Some(other) => {
                return Err(ExpandError::NotAField {
                    sequence: format!("{digits}{other}"),
                })
            }
            None => return Err(ExpandError::LonePercent { width: digits }),
        }
    }
    if out.is_empty() {
        return Err(ExpandError::Empty);
    }
    if out.contains('\0') {
        return Err(ExpandError::Nul);
    }
    Ok(out)
}

/// The files for the job's stdout and stderr, as absolute paths (a relative pattern is
/// relative to `base`, the job's working directory), by Slurm's rule: stdout goes to
/// `--output`; stderr to `--error`, else to `--output` too; a stream with neither stays
/// in the spool (`None`).
pub fn output_files(
    output: Option<&str>,
    error: Option<&str>,
    fields: &PatternFields,
    base: &Path,
) -> Result<(Option<String>, Option<String>), PatternError> {
    let one = |option: &'static str, pattern: Option<&str>| {
        pattern
            .map(|p| {
                let expanded = expand(p, fields).map_err(|reason| PatternError {
                    option,
                    pattern: p.to_string(),
                    reason,
                })?;
                Ok(base.join(expanded).to_string_lossy().into_owned())
            })
            .transpose()
    };
    let stdout = one("output", output)?;
    let stderr = one("error", error)?.or_else(|| stdout.clone());
    Ok((stdout, stderr))
}

/// The file the shim gave the job for one stream (a record of `outputs.json`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Opened {
    pub path: PathBuf,
    pub dev: u64,
    pub ino: u64,
    /// Its owner when it was opened.
    pub uid: u32,
    /// A regular file (not `/dev/null` or another device).
    pub regular: bool,
    /// The uid the job ran as: the log port serves the file only while that uid owns
    /// it (absent from an older record: not served).
    #[serde(default)]
    pub job_uid: Option<u32>,
}

/// `outputs.json`: the files outside the spool the job writes to.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct OutputsRecord {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stdout: Option<Opened>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stderr: Option<Opened>,
}

impl OutputsRecord {
    /// The record of stdout, or of stderr.
    pub(crate) fn stream(self, stderr: bool) -> Option<Opened> {
        if stderr {
            self.stderr
        } else {
            self.stdout
        }
    }
}

impl Opened {
    /// The record of `f`, opened at `path` for a job running as `job_uid`.
    pub(crate) fn of(path: &Path, f: &File, job_uid: u32) -> io::Result<Opened> {
        let m = f.metadata()?;
        Ok(Opened {
            path: path.to_path_buf(),
            dev: m.dev(),
            ino: m.ino(),
            uid: m.uid(),
            regular: m.file_type().is_file(),
            job_uid: Some(job_uid),
        })
    }

    fn same_file(&self, m: &std::fs::Metadata) -> bool {
        m.file_type().is_file() && (m.dev(), m.ino(), m.uid()) == (self.dev, self.ino, self.uid)
    }
}

/// The credentials the shim creates a job's output file with: the job's uid, gid and
/// groups.
#[derive(Debug, Clone, Copy)]
pub(crate) struct As<'a> {
    pub uid: u32,
    pub gid: u32,
    pub groups: &'a [u32],
}

/// Opens (creating it, mode 0600: the job's output is its user's alone) the file `path`
/// for a job's stream,
/// with the job's credentials where `who` is given: its effective uid, gid and groups
/// are the job's while the file is opened, so the kernel checks (and the file gets)
/// exactly the user's rights. Appends; truncates first when `truncate`. A FIFO without
/// a reader is an error rather than a launch that hangs.
///
/// Only for a single-threaded process (the shim): the credentials are the process's.
pub(crate) fn create_as(path: &Path, who: Option<As>, truncate: bool) -> io::Result<File> {
    let open = || -> io::Result<File> {
        // std refuses truncate with append; the kernel does both.
        let trunc = if truncate { libc::O_TRUNC } else { 0 };
        let f = OpenOptions::new()
            .append(true)
            .create(true)
            .mode(0o600)
            .custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY | trunc)
            .open(path)?;
        let flags = nix::fcntl::fcntl(&f, nix::fcntl::FcntlArg::F_GETFL)?;
        let flags = nix::fcntl::OFlag::from_bits_truncate(flags) & !nix::fcntl::OFlag::O_NONBLOCK;
        nix::fcntl::fcntl(&f, nix::fcntl::FcntlArg::F_SETFL(flags))?;
        Ok(f)
    };
    let Some(who) = who.filter(|_| Uid::effective().is_root()) else {
        return open();
    };
    let groups = nix::unistd::getgroups()?;
    let egid = Gid::effective();
    // Groups and gid first, while still root; the uid last; back in the reverse order.
    let groups_as: Vec<Gid> = who.groups.iter().map(|&g| Gid::from_raw(g)).collect();
    nix::unistd::setgroups(&groups_as)?;
    let switched = nix::unistd::setegid(Gid::from_raw(who.gid))
        .and_then(|()| nix::unistd::seteuid(Uid::from_raw(who.uid)));
    let opened = switched.map_err(io::Error::from).and_then(|()| open());
    let back = nix::unistd::seteuid(Uid::from_raw(0))
        .and_then(|()| nix::unistd::setegid(egid))
        .and_then(|()| nix::unistd::setgroups(&groups));
    if let Err(e) = back {
        // Nothing more may run with the user's credentials half applied.
        eprintln!("tranche-shim: cannot return to the agent's credentials: {e}");
        std::process::abort();
    }
    opened
}

/// Where one stream of an attempt's output is read from: the spool's file, or the file
/// outside the spool the job's user named (`--output`/`--error`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OutputFile {
    path: PathBuf,
    /// Set for a file outside the spool: the file the job was given.
    opened: Option<Opened>,
}

impl OutputFile {
    pub(crate) fn spool(path: PathBuf) -> OutputFile {
        OutputFile { path, opened: None }
    }

    pub(crate) fn outside(opened: Opened) -> OutputFile {
        OutputFile {
            path: opened.path.clone(),
            opened: Some(opened),
        }
    }

    /// The file's path on the node.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Opens it for reading. A file outside the spool is opened only while its path
    /// leads, with no symlink at its end, to the very file the job was given (the same
    /// device, inode and owner) and that is a regular file: otherwise the error says
    /// why (replaced since, or a device such as `/dev/null` that keeps nothing), and
    /// the caller names the path.
    pub fn open(&self) -> io::Result<File> {
        let Some(opened) = &self.opened else {
            return File::open(&self.path);
        };
        if opened.job_uid != Some(opened.uid) {
            return Err(io::Error::other(match opened.job_uid {
                Some(j) => format!(
                    "owned by uid {}, not by the job's uid {j}: only a file of the job's own \
                     user is served",
                    opened.uid
                ),
                None => "recorded without the job's uid, so it is not served".to_string(),
            }));
        }
        if !opened.regular {
            return Err(io::Error::other(
                "not a regular file (a device such as /dev/null): nothing of the job's output \
                 is kept there",
            ));
        }
        let replaced = || {
            io::Error::other(
                "no longer the file the job wrote its output to (replaced after the job \
                 started), so it is not read",
            )
        };
        // Checked before opening (opening a device can have effects) and again after
        // (the path may change between the two).
        let before = std::fs::symlink_metadata(&self.path)?;
        if !opened.same_file(&before) {
            return Err(replaced());
        }
        let f = OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_NOCTTY)
            .open(&self.path)?;
        if !opened.same_file(&f.metadata()?) {
            return Err(replaced());
        }
        Ok(f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fields() -> PatternFields<'static> {
        PatternFields {
            job: JobId(49),
            array: Some((JobId(42), 7)),
            name: "train",
            user: "kim",
            node: "n3",
            rank: 1,
        }
    }

    /// The fields, and a width zero-padding numbers only, capped at ten digits.
    #[test]
    fn slurm_fields_expand() {
        let f = fields();
        for (pattern, want) in [
            ("out-%A_%a.txt", "out-42_7.txt"),
            ("%x-%j-%u@%N.%n", "train-49-kim@n3.1"),
            ("100%%-%j", "100%-49"),
            ("no fields", "no fields"),
            ("%4a|%3j|%2n", "0007|049|01"),
            ("%5x", "train"),
            ("%20j", "0000000049"),
        ] {
            assert_eq!(expand(pattern, &f).unwrap(), want, "{pattern}");
        }
    }

    #[test]
    fn a_job_that_is_no_task_of_an_array_has_its_own_id_and_slurms_no_task_index() {
        let mut f = fields();
        f.array = None;
        assert_eq!(expand("%A_%a", &f).unwrap(), "49_4294967294");
    }

    #[test]
    fn unknown_fields_and_lone_percents_are_errors() {
        let f = fields();
        let e = expand("out-%q.txt", &f).unwrap_err();
        assert_eq!(
            e,
            ExpandError::NotAField {
                sequence: "q".into()
            }
        );
        let e = e.to_string();
        assert!(e.starts_with("`%q` is not a field; use %j (job id)"), "{e}");
        assert!(expand("%3q", &f)
            .unwrap_err()
            .to_string()
            .starts_with("`%3q` is not a field"));
        let e = expand("out%", &f).unwrap_err();
        assert_eq!(
            e,
            ExpandError::LonePercent {
                width: String::new()
            }
        );
        assert!(e.to_string().starts_with("it ends in a lone `%`"));
        assert!(expand("%3%", &f)
            .unwrap_err()
            .to_string()
            .starts_with("`%3%` is not a field"));
        let mut empty = fields();
        empty.name = "";
        let e = expand("%x", &empty).unwrap_err();
        assert_eq!(e, ExpandError::Empty);
        assert_eq!(e.to_string(), "it expands to an empty path");
    }

    #[test]
    fn output_alone_takes_both_streams_and_relative_paths_start_at_the_base() {
        let f = fields();
        let base = Path::new("/home/kim/project");
        let both = output_files(Some("out-%a.txt"), None, &f, base).unwrap();
        let out = "/home/kim/project/out-7.txt".to_string();
        assert_eq!(both, (Some(out.clone()), Some(out.clone())));
        let split = output_files(Some("out-%a.txt"), Some("/tmp/err-%j"), &f, base).unwrap();
        assert_eq!(split, (Some(out), Some("/tmp/err-49".into())));
        let err_only = output_files(None, Some("e"), &f, base).unwrap();
        assert_eq!(err_only, (None, Some("/home/kim/project/e".into())));
        assert_eq!(output_files(None, None, &f, base).unwrap(), (None, None));
    }

    #[test]
    fn a_bad_pattern_names_the_option_and_the_pattern() {
        let e = output_files(Some("ok"), Some("e-%q"), &fields(), Path::new("/")).unwrap_err();
        assert!(
            e.to_string()
                .starts_with("--error pattern `e-%q`: `%q` is not a field"),
            "{e}"
        );
    }

    #[test]
    fn a_replaced_output_file_is_not_read() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("out.txt");
        std::fs::write(&path, "job output\n").unwrap();
        let f = File::open(&path).unwrap();
        let me = nix::unistd::geteuid().as_raw();
        let kept = OutputFile::outside(Opened::of(&path, &f, me).unwrap());
        let mut s = String::new();
        io::Read::read_to_string(&mut kept.open().unwrap(), &mut s).unwrap();
        assert_eq!(s, "job output\n");
        // Replaced by a link to another file: refused, though the target is readable.
        let other = dir.path().join("secret");
        std::fs::write(&other, "secret\n").unwrap();
        std::fs::remove_file(&path).unwrap();
        std::os::unix::fs::symlink(&other, &path).unwrap();
        let e = kept.open().unwrap_err();
        assert!(e.to_string().starts_with("no longer the file"), "{e}");
        // Replaced by another file (a new inode: `f` keeps the old one in use): refused.
        std::fs::remove_file(&path).unwrap();
        std::fs::write(&path, "new\n").unwrap();
        assert!(kept.open().is_err());
        // A device keeps nothing.
        let null = Path::new("/dev/null");
        let n = File::open(null).unwrap();
        let e = OutputFile::outside(Opened::of(null, &n, 0).unwrap())
            .open()
            .unwrap_err();
        assert!(e.to_string().contains("not a regular file"), "{e}");
    }
}
