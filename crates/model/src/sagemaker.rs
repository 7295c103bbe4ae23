//! A SageMaker training job's part of a job spec, and its limits.

use crate::error::{invalid, ValidationError};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// Most hyperparameters of one training job (SageMaker's limit).
pub const MAX_HYPERPARAMETERS: usize = 100;
/// Most input channels of one training job (SageMaker's limit).
pub const MAX_CHANNELS: usize = 20;

/// A SageMaker training job's part of a job spec: what the node needs to give the
/// container SageMaker's contract (`/opt/ml/input/config/*.json`, `/opt/ml/model`,
/// `/opt/ml/output`, the `SM_*` variables), and the request as it was sent.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SageMakerJob {
    /// `TrainingJobName` of the request (the job's name when it had none).
    pub training_job_name: String,
    /// `HyperParameters`, as strings (SageMaker passes them as strings).
    pub hyperparameters: BTreeMap<String, String>,
    /// Channel name → a directory on the nodes: a `FileSystemDataSource`'s, mounted
    /// read-only at `/opt/ml/input/data/<channel>`, or an `S3DataSource`'s prefix in the
    /// S3 store, which the node copies there (the payload says which channel is which).
    pub channels: BTreeMap<String, String>,
    /// The `CreateTrainingJob` request (`serviceRequestPayload`), as it was sent.
    pub payload: String,
    /// The AWS instance type the job asked for (`ResourceConfig.InstanceType`).
    pub instance_type: String,
}

/// The variable of a SageMaker job's environment that names the directory on the
/// nodes where the gang's first node writes `model.tar.gz` of `/opt/ml/model` once the
/// job exits 0: `<S3OutputPath>/<TrainingJobName>/output` in the cluster's S3 store.
/// The controller sets it (over any the request gives) where `[aws] s3_dir` is set.
pub const OUTPUT_DIR_VAR: &str = "TRANCHE_SAGEMAKER_OUTPUT_DIR";

/// Most bytes of a hyperparameter's name and value (SageMaker's limits).
pub const MAX_HYPERPARAMETER_KEY_BYTES: usize = 256;
pub const MAX_HYPERPARAMETER_VALUE_BYTES: usize = 2500;

impl SageMakerJob {
    pub fn validate(&self) -> Result<(), ValidationError> {
        for (field, v, max) in [
            ("TrainingJobName", &self.training_job_name, 128),
            ("ResourceConfig.InstanceType", &self.instance_type, 64),
        ] {
            if v.len() > max {
                return Err(invalid(
                    field,
                    format!("must be at most {max} bytes, got {}", v.len()),
                ));
            }
        }
        for (k, v) in &self.hyperparameters {
            if k.len() > MAX_HYPERPARAMETER_KEY_BYTES || v.len() > MAX_HYPERPARAMETER_VALUE_BYTES {
                return Err(invalid(
                    "HyperParameters",
                    format!(
                        "a name must be at most {MAX_HYPERPARAMETER_KEY_BYTES} bytes and a value at most {MAX_HYPERPARAMETER_VALUE_BYTES}, got {} and {}",
                        k.len(),
                        v.len()
                    ),
                ));
            }
        }
        if self.hyperparameters.len() > MAX_HYPERPARAMETERS {
            return Err(invalid(
                "HyperParameters",
                format!("at most {MAX_HYPERPARAMETERS} entries"),
            ));
        }
        if self.channels.len() > MAX_CHANNELS {
            return Err(invalid(
                "InputDataConfig",
                format!("at most {MAX_CHANNELS} channels"),
            ));
        }
        for (name, path) in &self.channels {
            if name.is_empty()
                || name.len() > 64
                || !name
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
            {
                return Err(invalid(
                    "InputDataConfig.ChannelName",
                    format!("`{name}`: must be 1 to 64 letters, digits, `-` or `_`"),
                ));
            }
            if !path.starts_with('/') || path.len() > crate::MAX_PATH_BYTES {
                return Err(invalid(
                    format!("InputDataConfig.{name}.DirectoryPath"),
                    format!(
                        "must be an absolute path of at most {} bytes",
                        crate::MAX_PATH_BYTES
                    ),
                ));
            }
        }
        Ok(())
    }
}
