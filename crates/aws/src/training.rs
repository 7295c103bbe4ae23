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
//!   up (`/opt/ml/...`, `SM_*`);
//! - `S3DataSource` channels (`S3Prefix`) → the prefix's directory in the submitter's
//!   namespace of the S3 store (`[aws] s3_dir`, see [`crate::s3`]), mounted like a file
//!   system channel; `OutputDataConfig.S3OutputPath` → the directory where the node
//!   writes `<job name>/output/model.tar.gz` of `/opt/ml/model` after the job.
//!
//! Members with no meaning on a rack (`RoleArn`, `VpcConfig`, `CheckpointConfig`, ...)
//! are accepted and ignored: the model and output also stay in the node's spool as the
//! job's output.

use std::collections::BTreeMap;
use std::path::{Component, Path};

use serde_json::Value;
use tranche_model::OUTPUT_DIR_VAR;
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

/// Reads `payload` of `user`'s job with the cluster's catalogs.
pub fn read(
    payload: &str,
    job_name: &str,
    user: &str,
    cfg: &AwsConfig,
    cap: &Capacity,
) -> AwsResult<Training> {
    let v: Value = serde_json::from_str(payload).map_err(|e| {
        AwsError::invalid(P, format!("must be a JSON CreateTrainingJob request: {e}"))
    })?;
    let Value::Object(req) = &v else {
        return Err(AwsError::invalid(
            P,
            "must be a JSON object (a CreateTrainingJob request)",
        ));
    };
    // The name is a directory of the output path on the nodes: only SageMaker's
    // characters (or, taken from the Batch job's name, Batch's).
    let name = match req.get("TrainingJobName") {
        None => {
            let ok = !job_name.is_empty()
                && job_name.len() <= 128
                && job_name
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_');
            if !ok {
                return Err(AwsError::invalid(
                    "jobName",
                    format!(
                        "names the training job: 1 to 128 letters, digits, hyphens and \
                         underscores, got `{job_name}`"
                    ),
                ));
            }
            job_name.to_string()
        }
        Some(Value::String(s)) => {
            let b = s.as_bytes();
            let ok = (1..=63).contains(&b.len())
                && b[0].is_ascii_alphanumeric()
                && b[b.len() - 1].is_ascii_alphanumeric()
                && b.iter().all(|c| c.is_ascii_alphanumeric() || *c == b'-');
            if !ok {
                return Err(bad(
                    "TrainingJobName",
                    format!(
                        "must be 1 to 63 letters, digits and hyphens, starting and ending \
                         with a letter or digit (SageMaker's rule), got `{s}`"
                    ),
                ));
            }
            s.clone()
        }
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
    let channels = channels(req.get("InputDataConfig"), user, cfg)?;
    let mut env = env;
    match req
        .get("OutputDataConfig")
        .and_then(|o| o.get("S3OutputPath"))
    {
        Some(Value::String(uri)) if cfg.s3_dir.is_some() => {
            let dir = s3_dir(uri, user, cfg, "OutputDataConfig.S3OutputPath")?;
            env.insert(OUTPUT_DIR_VAR.into(), format!("{dir}/{name}/output"));
        }
        _ => {
            env.remove(OUTPUT_DIR_VAR);
        }
    }
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

/// The directory of `s3://<bucket>/<prefix>` in `user`'s namespace of the store
/// (`member` names the request's member in an error).
fn s3_dir(uri: &str, user: &str, cfg: &AwsConfig, member: &str) -> AwsResult<String> {
    let store = cfg.s3_dir.as_ref().ok_or_else(|| {
        bad(
            member,
            format!("`{uri}` is in S3, which this cluster does not serve ([aws] s3_dir is not set); use a FileSystemDataSource whose FileSystemId is in [aws.file_systems]"),
        )
    })?;
    let rest = uri
        .strip_prefix("s3://")
        .ok_or_else(|| bad(member, format!("`{uri}` must be an s3:// URI")))?;
    let (bucket, prefix) = rest.split_once('/').unwrap_or((rest, ""));
    let rel = Path::new(prefix.trim_matches('/'));
    if bucket.is_empty()
        || bucket.starts_with('.')
        || rel.components().any(|c| !matches!(c, Component::Normal(_)))
    {
        return Err(bad(
            member,
            format!("`{uri}` must be s3://<bucket>/<prefix>, without `.` or `..` segments"),
        ));
    }
    let ns = crate::s3::namespace(store, user).ok_or_else(|| {
        bad(
            member,
            format!("user `{user}` has no namespace in the S3 store"),
        )
    })?;
    let dir = ns.join(bucket);
    Ok(match rel.as_os_str().is_empty() {
        true => dir,
        false => dir.join(rel),
    }
    .display()
    .to_string())
}

fn channels(v: Option<&Value>, user: &str, cfg: &AwsConfig) -> AwsResult<BTreeMap<String, String>> {
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
        } else if let Some(s3) = src.and_then(|s| s.get("S3DataSource")) {
            let member = format!("{m}.DataSource.S3DataSource");
            match s3.get("S3DataType").and_then(Value::as_str) {
                None | Some("S3Prefix") => {}
                Some(t) => {
                    return Err(bad(
                        &format!("{member}.S3DataType"),
                        format!("channel `{name}`: `{t}` is not served; give S3Prefix"),
                    ))
                }
            }
            let uri = s3
                .get("S3Uri")
                .and_then(Value::as_str)
                .ok_or_else(|| bad(&format!("{member}.S3Uri"), "is required"))?;
            let dir = s3_dir(
                uri,
                user,
                cfg,
                &format!("{member}.S3Uri (channel `{name}`)"),
            )?;
            out.insert(name.to_string(), dir);
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
        let t = read(p, "job", "alice", &c, &cap).unwrap();
        assert_eq!(t.image, "/images/train");
        assert_eq!(t.command, ["/bin/sh", "-c", "echo hi"]);
        assert_eq!((t.unit.as_str(), t.gpus_per_node, t.nodes), ("a10g", 1, 2));
        assert_eq!(t.max_runtime_s, Some(600));
        assert_eq!(t.env["FOO"], "bar");
        assert_eq!(t.sagemaker.hyperparameters["lr"], "0.1");
        assert_eq!(t.sagemaker.channels["train"], "/srv/data/sets/a");
        assert!(!t.env.contains_key(OUTPUT_DIR_VAR), "no S3 store");
        assert_eq!(t.sagemaker.training_job_name, "t1");
    }

    #[test]
    fn s3_channels_and_the_output_path_are_the_users_directories_in_the_store() {
        let (mut c, cap) = cfg();
        c.s3_dir = Some("/srv/s3".into());
        let p = |channels: &str| {
            format!(
                r#"{{"TrainingJobName":"tj-1","AlgorithmSpecification":{{"TrainingImage":"123456789012.dkr.ecr.us-west-2.amazonaws.com/train:latest"}},"ResourceConfig":{{"InstanceType":"ml.g5.xlarge"}},
                "OutputDataConfig":{{"S3OutputPath":"s3://out/runs/"}},"InputDataConfig":[{channels}]}}"#
            )
        };
        let t = read(&p(r#"{"ChannelName":"code","DataSource":{"S3DataSource":{"S3DataType":"S3Prefix","S3Uri":"s3://sm-bucket/job/input/code"}}},
            {"ChannelName":"all","DataSource":{"S3DataSource":{"S3Uri":"s3://sm-bucket"}}}"#), "j", "alice", &c, &cap).unwrap();
        assert_eq!(
            t.sagemaker.channels["code"],
            "/srv/s3/alice/sm-bucket/job/input/code"
        );
        assert_eq!(t.sagemaker.channels["all"], "/srv/s3/alice/sm-bucket");
        assert_eq!(t.env[OUTPUT_DIR_VAR], "/srv/s3/alice/out/runs/tj-1/output");
        for (ch, why) in [
            (
                r#"{"ChannelName":"x","DataSource":{"S3DataSource":{"S3Uri":"s3://b/a/../../bob/b"}}}"#,
                "without `.` or `..`",
            ),
            (
                r#"{"ChannelName":"x","DataSource":{"S3DataSource":{"S3Uri":"s3://../bob"}}}"#,
                "s3://<bucket>/<prefix>",
            ),
            (
                r#"{"ChannelName":"x","DataSource":{"S3DataSource":{"S3Uri":"https://b/k"}}}"#,
                "must be an s3:// URI",
            ),
            (
                r#"{"ChannelName":"x","DataSource":{"S3DataSource":{"S3DataType":"ManifestFile","S3Uri":"s3://b/m"}}}"#,
                "`ManifestFile` is not served",
            ),
            (
                r#"{"ChannelName":"x","DataSource":{"S3DataSource":{}}}"#,
                "S3Uri",
            ),
        ] {
            let e = read(&p(ch), "j", "alice", &c, &cap).unwrap_err();
            assert!(e.message.contains(why), "{ch}: {}", e.message);
        }
    }

    #[test]
    fn unknown_images_s3_channels_and_bad_members_are_refused_by_name() {
        let (c, cap) = cfg();
        let base = |extra: &str| {
            format!(
                r#"{{"AlgorithmSpecification":{{"TrainingImage":"123456789012.dkr.ecr.us-west-2.amazonaws.com/train:latest"}},"ResourceConfig":{{"InstanceType":"ml.g5.xlarge","InstanceCount":1}}{extra}}}"#
            )
        };
        let e = read(&base(r#","InputDataConfig":[{"ChannelName":"train","DataSource":{"S3DataSource":{"S3Uri":"s3://b/k"}}}]"#), "j", "alice", &c, &cap).unwrap_err();
        assert!(
            e.message.contains("(channel `train`)")
                && e.message.contains("[aws] s3_dir is not set"),
            "{}",
            e.message
        );
        let e = read(
            &base(r#","HyperParameters":{"lr":0.1}"#),
            "j",
            "alice",
            &c,
            &cap,
        )
        .unwrap_err();
        assert!(e.message.contains("HyperParameters.lr"), "{}", e.message);
        // The training job's name becomes a directory of the output path on the nodes.
        for name in ["../../../../etc/cron.d", "a/b", "-a", "a_b", ""] {
            let p = format!(
                r#"{{"TrainingJobName":"{name}","AlgorithmSpecification":{{"TrainingImage":"123456789012.dkr.ecr.us-west-2.amazonaws.com/train:latest"}},"ResourceConfig":{{"InstanceType":"ml.g5.xlarge"}}}}"#
            );
            let e = read(&p, "j", "alice", &c, &cap).unwrap_err();
            assert!(
                e.message.contains("TrainingJobName"),
                "{name}: {}",
                e.message
            );
        }
        let p = r#"{"AlgorithmSpecification":{"TrainingImage":"123456789012.dkr.ecr.us-west-2.amazonaws.com/train:latest"},"ResourceConfig":{"InstanceType":"ml.g5.xlarge"}}"#;
        let e = read(p, "../up", "alice", &c, &cap).unwrap_err();
        assert!(e.message.contains("jobName"), "{}", e.message);
        let e = read(&base(r#","InputDataConfig":[{"ChannelName":"x","DataSource":{"FileSystemDataSource":{"FileSystemId":"fs-1","DirectoryPath":"/../etc"}}}]"#), "j", "alice", &c, &cap).unwrap_err();
        assert!(e.message.contains(".."), "{}", e.message);
        let p = r#"{"AlgorithmSpecification":{"TrainingImage":"nope:1"},"ResourceConfig":{"InstanceType":"ml.g5.xlarge"}}"#;
        let e = read(p, "j", "alice", &c, &cap).unwrap_err();
        assert!(
            e.message
                .contains("`nope:1` is not in this cluster's image catalog"),
            "{}",
            e.message
        );
        let e = read("[1]", "j", "alice", &c, &cap).unwrap_err();
        assert!(e.message.contains("serviceRequestPayload"), "{}", e.message);
        // Without an entrypoint the command is empty: the image's entrypoint runs.
        let t = read(&base(""), "j", "alice", &c, &cap).unwrap();
        assert!(t.command.is_empty());
        assert_eq!(t.sagemaker.training_job_name, "j");
    }
}
