//! A SageMaker `CreateTrainingJob` request (a service job's `serviceRequestPayload`)
//! read as a Tranche job:
//!
//! - `AlgorithmSpecification.TrainingImage` → the image, through the image catalog
//!   (`[aws.images]`: exact references, then patterns); an image not in it is refused;
//! - `ContainerEntrypoint` + `ContainerArguments` → the command; without an entrypoint
//!   the node runs the image's entrypoint with `train`, as SageMaker does;
//! - `ResourceConfig` → unit, GPUs per node and nodes (`InstanceCount > 1` is a gang);
//! - `StoppingCondition.MaxRuntimeInSeconds` → the time limit;
//! - `Environment` → the environment; `HyperParameters` and `FileSystemDataSource`
//!   channels (through `[aws.file_systems]`) → the container contract the node sets
//!   up (`/opt/ml/...`, `SM_*`). S3 channels are refused: the rack has no S3.
//!
//! Members with no meaning on a rack (`RoleArn`, `OutputDataConfig`, `VpcConfig`,
//! `CheckpointConfig`, ...) are accepted and ignored: the model and output stay in the
//! node's spool as the job's output.

use std::collections::BTreeMap;
use std::path::{Component, Path};

use serde_json::Value;
use tranche_model::{SageMakerJob, Unit};

use super::capacity::Capacity;
use super::wire::{AwsError, AwsResult};
use tranche_controller::config::AwsConfig;

/// What a training request becomes.
#[derive(Debug, Clone)]
pub struct Training {
    pub image: String,
    pub command: Vec<String>,
    pub env: BTreeMap<String, String>,
    pub unit: Unit,
    pub gpus_per_node: u32,
    pub nodes: u32,
    pub max_runtime_s: Option<u64>,
    pub sagemaker: SageMakerJob,
}

const P: &str = "serviceRequestPayload";

fn bad(member: &str, rule: impl std::fmt::Display) -> AwsError {
    AwsError::invalid(&format!("{P}.{member}"), rule)
}

fn strings(v: Option<&Value>, member: &str) -> AwsResult<Vec<String>> {
    match v {
        None | Some(Value::Null) => Ok(vec![]),
        Some(Value::Array(a)) => a
            .iter()
            .map(|x| {
                x.as_str()
                    .map(str::to_string)
                    .ok_or_else(|| bad(member, "must be a list of strings"))
            })
            .collect(),
        Some(_) => Err(bad(member, "must be a list of strings")),
    }
}

fn string_map(v: Option<&Value>, member: &str) -> AwsResult<BTreeMap<String, String>> {
    match v {
        None | Some(Value::Null) => Ok(BTreeMap::new()),
        Some(Value::Object(m)) => m
            .iter()
            .map(|(k, x)| match x {
                Value::String(s) => Ok((k.clone(), s.clone())),
                _ => Err(bad(
                    &format!("{member}.{k}"),
                    "must be a string (SageMaker passes these as strings)",
                )),
            })
            .collect(),
        Some(_) => Err(bad(member, "must be an object of strings")),
    }
}

/// Reads `payload` with the cluster's catalogs.
pub fn read(payload: &str, job_name: &str, cfg: &AwsConfig, cap: &Capacity) -> AwsResult<Training> {
    let v: Value = serde_json::from_str(payload).map_err(|e| {
        AwsError::invalid(P, format!("must be a JSON CreateTrainingJob request: {e}"))
    })?;
    let Value::Object(req) = &v else {
        return Err(AwsError::invalid(
            P,
            "must be a JSON object (a CreateTrainingJob request)",
        ));
    };
    let name = match req.get("TrainingJobName") {
        None => job_name.to_string(),
        Some(Value::String(s)) => s.clone(),
        Some(_) => return Err(bad("TrainingJobName", "must be a string")),
    };
    let algo = req
        .get("AlgorithmSpecification")
        .and_then(Value::as_object)
        .ok_or_else(|| bad("AlgorithmSpecification", "is required"))?;
    if algo.contains_key("AlgorithmName") && !algo.contains_key("TrainingImage") {
        return Err(bad(
            "AlgorithmSpecification.AlgorithmName",
            "marketplace algorithms are not available on this cluster; give a TrainingImage",
        ));
    }
    let image_ref = algo
        .get("TrainingImage")
        .and_then(Value::as_str)
        .ok_or_else(|| bad("AlgorithmSpecification.TrainingImage", "is required"))?;
    let image = cfg.image(image_ref).cloned().ok_or_else(|| {
        bad(
            "AlgorithmSpecification.TrainingImage",
            format!(
                "image `{image_ref}` is not in this cluster's image catalog ([aws.images] has {}); ask an admin to add it",
                if cfg.images.is_empty() {
                    "no images".to_string()
                } else {
                    cfg.images.keys().cloned().collect::<Vec<_>>().join(", ")
                }
            ),
        )
    })?;
    let mut command = strings(
        algo.get("ContainerEntrypoint"),
        "AlgorithmSpecification.ContainerEntrypoint",
    )?;
    let args = strings(
        algo.get("ContainerArguments"),
        "AlgorithmSpecification.ContainerArguments",
    )?;
    if command.is_empty() && !args.is_empty() {
        return Err(bad(
            "AlgorithmSpecification.ContainerArguments",
            "needs a ContainerEntrypoint on this cluster",
        ));
    }
    command.extend(args);

    let rc = req
        .get("ResourceConfig")
        .and_then(Value::as_object)
        .ok_or_else(|| bad("ResourceConfig", "is required"))?;
    if rc.contains_key("InstanceGroups") {
        return Err(bad(
            "ResourceConfig.InstanceGroups",
            "heterogeneous clusters are not supported; give InstanceType and InstanceCount",
        ));
    }
    let itype = rc
        .get("InstanceType")
        .and_then(Value::as_str)
        .ok_or_else(|| bad("ResourceConfig.InstanceType", "is required"))?;
    let count = match rc.get("InstanceCount") {
        None => 1,
        Some(c) => c
            .as_u64()
            .filter(|n| (1..=4096).contains(n))
            .ok_or_else(|| bad("ResourceConfig.InstanceCount", "must be 1 to 4096"))?,
    };
    let (t, unit) = cap.instance(&format!("{P}.ResourceConfig.InstanceType"), itype)?;

    let max_runtime_s = match req
        .get("StoppingCondition")
        .and_then(|s| s.get("MaxRuntimeInSeconds"))
    {
        None | Some(Value::Null) => None,
        Some(x) => Some(x.as_u64().filter(|n| *n >= 1).ok_or_else(|| {
            bad(
                "StoppingCondition.MaxRuntimeInSeconds",
                "must be a whole number of seconds, at least 1",
            )
        })?),
    };
    let env = string_map(req.get("Environment"), "Environment")?;
    let hyperparameters = string_map(req.get("HyperParameters"), "HyperParameters")?;
    let channels = channels(req.get("InputDataConfig"), cfg)?;
    Ok(Training {
        image,
        command,
        env,
        unit,
        gpus_per_node: t.gpus,
        nodes: count as u32,
        max_runtime_s,
        sagemaker: SageMakerJob {
            training_job_name: name,
            hyperparameters,
            channels,
            payload: payload.to_string(),
            instance_type: itype.to_string(),
        },
    })
}

fn channels(v: Option<&Value>, cfg: &AwsConfig) -> AwsResult<BTreeMap<String, String>> {
    let list = match v {
        None | Some(Value::Null) => return Ok(BTreeMap::new()),
        Some(Value::Array(a)) => a,
        Some(_) => return Err(bad("InputDataConfig", "must be a list of channels")),
    };
    let mut out = BTreeMap::new();
    for (i, ch) in list.iter().enumerate() {
        let m = format!("InputDataConfig.{}", i + 1);
        let name = ch
            .get("ChannelName")
            .and_then(Value::as_str)
            .ok_or_else(|| bad(&format!("{m}.ChannelName"), "is required"))?;
        let src = ch.get("DataSource").and_then(Value::as_object);
        let fs = src.and_then(|s| s.get("FileSystemDataSource"));
        if let Some(fs) = fs {
            let id = fs
                .get("FileSystemId")
                .and_then(Value::as_str)
                .ok_or_else(|| {
                    bad(
                        &format!("{m}.DataSource.FileSystemDataSource.FileSystemId"),
                        "is required",
                    )
                })?;
            let root = cfg.file_systems.get(id).ok_or_else(|| {
                bad(
                    &format!("{m}.DataSource.FileSystemDataSource.FileSystemId"),
                    format!(
                        "channel `{name}`: file system `{id}` is not one this cluster maps to a directory ([aws.file_systems] has {})",
                        if cfg.file_systems.is_empty() {
                            "none".to_string()
                        } else {
                            cfg.file_systems.keys().cloned().collect::<Vec<_>>().join(", ")
                        }
                    ),
                )
            })?;
            let dir = fs
                .get("DirectoryPath")
                .and_then(Value::as_str)
                .unwrap_or("/");
            let rel = Path::new(dir.trim_start_matches('/'));
            if rel.components().any(|c| !matches!(c, Component::Normal(_))) {
                return Err(bad(
                    &format!("{m}.DataSource.FileSystemDataSource.DirectoryPath"),
                    format!("channel `{name}`: `{dir}` must not contain `..`"),
                ));
            }
            out.insert(name.to_string(), root.join(rel).display().to_string());
        } else if src.is_some_and(|s| s.contains_key("S3DataSource")) {
            return Err(bad(
                &format!("{m}.DataSource.S3DataSource"),
                format!(
                    "channel `{name}` reads from S3, which this cluster does not have; use a FileSystemDataSource whose FileSystemId is in [aws.file_systems]"
                ),
            ));
        } else {
            return Err(bad(
                &format!("{m}.DataSource"),
                format!("channel `{name}` needs a FileSystemDataSource"),
            ));
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use tranche_controller::config::InstanceType;

    fn cfg() -> (AwsConfig, Capacity) {
        let mut c = AwsConfig::default();
        c.instance_types.insert(
            "ml.g5.xlarge".into(),
            InstanceType {
                unit: "a10g".into(),
                gpus: 1,
            },
        );
        c.images.insert(
            "123456789012.dkr.ecr.us-west-2.amazonaws.com/train:latest".into(),
            "/images/train".into(),
        );
        c.file_systems.insert("fs-1".into(), "/srv/data".into());
        let cap = Capacity {
            types: c.instance_types.clone(),
        };
        (c, cap)
    }

    #[test]
    fn a_training_request_becomes_a_gang_with_its_contract() {
        let (c, cap) = cfg();
        let p = r#"{"TrainingJobName":"t1","AlgorithmSpecification":{"TrainingImage":"123456789012.dkr.ecr.us-west-2.amazonaws.com/train:latest","ContainerEntrypoint":["/bin/sh"],"ContainerArguments":["-c","echo hi"]},
          "HyperParameters":{"lr":"0.1"},"ResourceConfig":{"InstanceType":"ml.g5.xlarge","InstanceCount":2},
          "StoppingCondition":{"MaxRuntimeInSeconds":600},"Environment":{"FOO":"bar"},
          "InputDataConfig":[{"ChannelName":"train","DataSource":{"FileSystemDataSource":{"FileSystemId":"fs-1","DirectoryPath":"/sets/a"}}}],
          "RoleArn":"arn:aws:iam::123456789012:role/R"}"#;
        let t = read(p, "job", &c, &cap).unwrap();
        assert_eq!(t.image, "/images/train");
        assert_eq!(t.command, ["/bin/sh", "-c", "echo hi"]);
        assert_eq!((t.unit.as_str(), t.gpus_per_node, t.nodes), ("a10g", 1, 2));
        assert_eq!(t.max_runtime_s, Some(600));
        assert_eq!(t.env["FOO"], "bar");
        assert_eq!(t.sagemaker.hyperparameters["lr"], "0.1");
        assert_eq!(t.sagemaker.channels["train"], "/srv/data/sets/a");
        assert_eq!(t.sagemaker.training_job_name, "t1");
    }

    #[test]
    fn unknown_images_s3_channels_and_bad_members_are_refused_by_name() {
        let (c, cap) = cfg();
        let base = |extra: &str| {
            format!(
                r#"{{"AlgorithmSpecification":{{"TrainingImage":"123456789012.dkr.ecr.us-west-2.amazonaws.com/train:latest"}},"ResourceConfig":{{"InstanceType":"ml.g5.xlarge","InstanceCount":1}}{extra}}}"#
            )
        };
        let e = read(&base(r#","InputDataConfig":[{"ChannelName":"train","DataSource":{"S3DataSource":{"S3Uri":"s3://b/k"}}}]"#), "j", &c, &cap).unwrap_err();
        assert!(
            e.message.contains("channel `train` reads from S3"),
            "{}",
            e.message
        );
        let e = read(&base(r#","HyperParameters":{"lr":0.1}"#), "j", &c, &cap).unwrap_err();
        assert!(e.message.contains("HyperParameters.lr"), "{}", e.message);
        let e = read(&base(r#","InputDataConfig":[{"ChannelName":"x","DataSource":{"FileSystemDataSource":{"FileSystemId":"fs-1","DirectoryPath":"/../etc"}}}]"#), "j", &c, &cap).unwrap_err();
        assert!(e.message.contains(".."), "{}", e.message);
        let p = r#"{"AlgorithmSpecification":{"TrainingImage":"nope:1"},"ResourceConfig":{"InstanceType":"ml.g5.xlarge"}}"#;
        let e = read(p, "j", &c, &cap).unwrap_err();
        assert!(
            e.message
                .contains("`nope:1` is not in this cluster's image catalog"),
            "{}",
            e.message
        );
        let e = read("[1]", "j", &c, &cap).unwrap_err();
        assert!(e.message.contains("serviceRequestPayload"), "{}", e.message);
        // Without an entrypoint the command is empty: the image's entrypoint runs.
        let t = read(&base(""), "j", &c, &cap).unwrap();
        assert!(t.command.is_empty());
        assert_eq!(t.sagemaker.training_job_name, "j");
    }
}
