//! A job as a caller who may see only its summary gets it.
//!
//! Which caller sees what is decided in one place, the controller's service layer;
//! this is only the shape of the answer: everything a listing shows (id, name, user,
//! share, queue, state, request, priority, times, attempts, transitions and reasons)
//! is kept, and the parts that may carry secrets or private paths are emptied: the
//! image, the command, the environment, the working directory, the output and error
//! paths, the tags, and of a SageMaker job its request, hyperparameters and channels.

use crate::job::{Job, JobSpec};

/// The parts of a spec that a redacted job leaves out, as the API names them.
pub const REDACTED_FIELDS: &[&str] = &[
    "image",
    "command",
    "env",
    "cwd",
    "output",
    "error",
    "tags",
    "sagemaker.payload",
    "sagemaker.hyperparameters",
    "sagemaker.channels",
];

impl Job {
    /// This job without the parts listed in [`REDACTED_FIELDS`].
    pub fn redacted(&self) -> Job {
        Job {
            spec: std::sync::Arc::new(self.spec.redacted()),
            ..self.clone()
        }
    }
}

impl JobSpec {
    /// This spec without the parts listed in [`REDACTED_FIELDS`]. Its image is empty,
    /// which no submitted spec has (`validate` requires one), so a redacted spec is
    /// told apart by [`JobSpec::is_redacted`].
    pub fn redacted(&self) -> JobSpec {
        JobSpec {
            image: String::new(),
            command: Vec::new(),
            env: Default::default(),
            cwd: None,
            output: None,
            error: None,
            tags: Default::default(),
            sagemaker: self.sagemaker.as_ref().map(|s| {
                Box::new(crate::sagemaker::SageMakerJob {
                    payload: String::new(),
                    hyperparameters: Default::default(),
                    channels: Default::default(),
                    ..(**s).clone()
                })
            }),
            ..self.clone()
        }
    }

    /// Whether this spec came from [`JobSpec::redacted`].
    pub fn is_redacted(&self) -> bool {
        self.image.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_redacted_spec_keeps_the_summary_and_drops_the_rest() {
        let mut s = JobSpec::new("train", "q", "vision", "alice", "h100", 8, 1);
        s.command = vec!["python".into(), "--token=x".into()];
        s.env.insert("HF_TOKEN".into(), "secret".into());
        s.cwd = Some("/home/alice/p".into());
        s.output = Some("/home/alice/out".into());
        s.tags.insert("team".into(), "a".into());
        let r = s.redacted();
        assert!(r.is_redacted() && !s.is_redacted());
        assert!(r.command.is_empty() && r.env.is_empty() && r.tags.is_empty());
        assert_eq!((r.cwd, r.output), (None, None));
        assert_eq!((r.user, r.share, r.name), (s.user, s.share, s.name));
    }
}
