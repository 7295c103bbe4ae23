//! Capacity in AWS's terms (instances of an instance type) and in Tranche's (GPUs of a
//! capacity unit), through `[aws.instance_types]`.
//!
//! In: `{capacityUnit: "ml.g5.xlarge", maxCapacity: 3}` with `ml.g5.xlarge = {unit =
//! "a10g", gpus = 1}` is a limit of 3 GPUs of `a10g`. Out: a unit's limit is shown in
//! the instance type of that unit with the most GPUs that divides it evenly (ties: the
//! first by name); a unit no instance type maps to is shown as itself, counting GPUs.
//!
//! A service environment may instead give one limit in [`NUM_INSTANCES`], as AWS's
//! FIFO queues do: `{capacityUnit: "NUM_INSTANCES", maxCapacity: 2}` is, for each unit
//! `[aws.instance_types]` maps to, 2 instances of that unit's largest type (with
//! `ml.g5.xlarge` = 1 and `ml.g5.12xlarge` = 4 GPUs of `a10g`, 8 GPUs of `a10g`).
//! Tranche counts GPUs, so jobs of smaller instances fit more of them than AWS would
//! run; a job of the largest instance always fits. It is shown as the limits it became.

use std::collections::BTreeMap;

use serde::Deserialize;
use serde_json::{json, Value};
use tranche_model::{CapacityLimit, Unit};

use super::wire::{AwsError, AwsResult};
use tranche_controller::config::InstanceType;

/// The capacity unit of AWS's FIFO and fair-share service environments: instances of
/// any type.
pub const NUM_INSTANCES: &str = "NUM_INSTANCES";

/// The most capacity limits a Tranche environment or share has.
const MAX_LIMITS: usize = 5;

/// `{capacityUnit, maxCapacity}` as sent.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AwsLimit {
    pub capacity_unit: Option<String>,
    pub max_capacity: Option<i64>,
}

#[derive(Debug, Clone)]
pub struct Capacity {
    pub types: BTreeMap<String, InstanceType>,
}

impl Capacity {
    /// The unit and GPUs per instance of an instance type.
    pub fn instance(&self, member: &str, name: &str) -> AwsResult<(&InstanceType, Unit)> {
        match self.types.get(name) {
            Some(t) => Ok((t, Unit::from(t.unit.as_str()))),
            None if name == NUM_INSTANCES => Err(AwsError::invalid(
                member,
                "capacityUnit NUM_INSTANCES is only for a service environment's single limit; a quota share counts instances of one of the types this cluster's admin configured: "
                    .to_string()
                    + &self.known(),
            )),
            None => Err(AwsError::invalid(
                member,
                format!(
                    "instance type `{name}` is not configured on this cluster (its [aws.instance_types] has {})",
                    self.known()
                ),
            )),
        }
    }

    /// `max` instances of any type: per unit, `max` of its largest instance type.
    fn num_instances(&self, member: &str, max: u32) -> AwsResult<Vec<CapacityLimit>> {
        let mut per_unit: BTreeMap<&str, u32> = BTreeMap::new();
        for t in self.types.values() {
            let g = per_unit.entry(t.unit.as_str()).or_default();
            *g = (*g).max(t.gpus);
        }
        if per_unit.is_empty() {
            return Err(AwsError::invalid(
                member,
                "capacityUnit NUM_INSTANCES counts instances of the types this cluster's admin configured, and its [aws.instance_types] has none",
            ));
        }
        if per_unit.len() > MAX_LIMITS {
            return Err(AwsError::invalid(
                member,
                format!(
                    "capacityUnit NUM_INSTANCES would be a limit for each of the {} units [aws.instance_types] maps to, and an environment has at most {MAX_LIMITS}; give one limit per instance type instead",
                    per_unit.len()
                ),
            ));
        }
        Ok(per_unit
            .into_iter()
            .map(|(unit, gpus)| CapacityLimit {
                unit: unit.into(),
                max: max * gpus,
            })
            .collect())
    }

    fn known(&self) -> String {
        if self.types.is_empty() {
            "none".into()
        } else {
            self.types.keys().cloned().collect::<Vec<_>>().join(", ")
        }
    }

    /// A service environment's AWS limits → Tranche's (GPUs per unit): instance types,
    /// or one limit in [`NUM_INSTANCES`].
    pub fn environment_limits(
        &self,
        member: &str,
        limits: &[AwsLimit],
    ) -> AwsResult<Vec<CapacityLimit>> {
        let Some(i) = limits
            .iter()
            .position(|l| l.capacity_unit.as_deref() == Some(NUM_INSTANCES))
        else {
            return self.to_tranche(member, limits, false);
        };
        let m = format!("{member}.{}", i + 1);
        if limits.len() > 1 {
            return Err(AwsError::invalid(
                &format!("{m}.capacityUnit"),
                format!(
                    "NUM_INSTANCES must be the environment's only capacity limit, got {} limits",
                    limits.len()
                ),
            ));
        }
        let max = limits[i]
            .max_capacity
            .ok_or_else(|| AwsError::invalid(&format!("{m}.maxCapacity"), "is required"))?;
        if !(1..=100_000).contains(&max) {
            return Err(AwsError::invalid(
                &format!("{m}.maxCapacity"),
                format!("must be 1 to 100000 instances, got {max}"),
            ));
        }
        self.num_instances(&format!("{m}.capacityUnit"), max as u32)
    }

    /// AWS limits → Tranche's (GPUs per unit). `allow_zero`: a share may have 0.
    pub fn to_tranche(
        &self,
        member: &str,
        limits: &[AwsLimit],
        allow_zero: bool,
    ) -> AwsResult<Vec<CapacityLimit>> {
        let mut out: Vec<CapacityLimit> = vec![];
        let mut by_unit: BTreeMap<Unit, String> = BTreeMap::new();
        for (i, l) in limits.iter().enumerate() {
            let m = format!("{member}.{}", i + 1);
            let name = l
                .capacity_unit
                .as_deref()
                .ok_or_else(|| AwsError::invalid(&format!("{m}.capacityUnit"), "is required"))?;
            let max = l
                .max_capacity
                .ok_or_else(|| AwsError::invalid(&format!("{m}.maxCapacity"), "is required"))?;
            let low = if allow_zero { 0 } else { 1 };
            if max < low || max > 100_000 {
                return Err(AwsError::invalid(
                    &format!("{m}.maxCapacity"),
                    format!("must be {low} to 100000 instances, got {max}"),
                ));
            }
            let (t, unit) = self.instance(&format!("{m}.capacityUnit"), name)?;
            if let Some(other) = by_unit.insert(unit.clone(), name.to_string()) {
                return Err(AwsError::invalid(
                    &format!("{m}.capacityUnit"),
                    format!(
                        "{other} and {name} are both GPUs of unit {unit} on this cluster; give one limit per unit"
                    ),
                ));
            }
            out.push(CapacityLimit {
                unit,
                max: (max as u32) * t.gpus,
            });
        }
        Ok(out)
    }

    /// The instance type a unit's `gpus` are shown in, and how many instances that is.
    pub fn to_aws(&self, unit: &Unit, gpus: u32) -> (String, u32) {
        let mut best: Option<(&String, u32)> = None;
        for (name, t) in &self.types {
            if t.unit != unit.as_str() || gpus % t.gpus != 0 {
                continue;
            }
            if best.is_none_or(|(_, g)| t.gpus > g) {
                best = Some((name, t.gpus));
            }
        }
        match best {
            Some((name, g)) => (name.clone(), gpus / g),
            None => (unit.to_string(), gpus),
        }
    }

    /// The GPUs per instance of the type a unit is shown in (1 for a unit shown as
    /// itself), to turn GPU counts of that unit into instances.
    pub fn per_instance(&self, unit: &Unit, shown_as: &str) -> f64 {
        match self.types.get(shown_as) {
            Some(t) if t.unit == unit.as_str() => t.gpus as f64,
            _ => 1.0,
        }
    }

    /// Tranche limits as AWS's `[{capacityUnit, maxCapacity}]`.
    pub fn limits_json(&self, limits: &[CapacityLimit]) -> Value {
        Value::Array(
            limits
                .iter()
                .map(|l| {
                    let (unit, max) = self.to_aws(&l.unit, l.max);
                    json!({"capacityUnit": unit, "maxCapacity": max})
                })
                .collect(),
        )
    }

    /// `[{capacityUnit, quantity}]` for GPUs in use per unit, in the unit's shown type.
    pub fn usage_json(&self, used: &[(Unit, u32, u32)]) -> Value {
        Value::Array(
            used.iter()
                .map(|(unit, gpus, max)| {
                    let (shown, _) = self.to_aws(unit, *max);
                    let per = self.per_instance(unit, &shown);
                    json!({"capacityUnit": shown, "quantity": *gpus as f64 / per})
                })
                .collect(),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cap() -> Capacity {
        let t = |u: &str, g| InstanceType {
            unit: u.into(),
            gpus: g,
        };
        Capacity {
            types: [
                ("ml.g5.xlarge".to_string(), t("a10g", 1)),
                ("ml.g5.12xlarge".to_string(), t("a10g", 4)),
                ("ml.p5.48xlarge".to_string(), t("h100", 8)),
            ]
            .into(),
        }
    }

    fn lim(u: &str, m: i64) -> AwsLimit {
        AwsLimit {
            capacity_unit: Some(u.into()),
            max_capacity: Some(m),
        }
    }

    #[test]
    fn instances_become_gpus_and_back() {
        let c = cap();
        let l = c
            .to_tranche(
                "capacityLimits",
                &[lim("ml.p5.48xlarge", 2), lim("ml.g5.xlarge", 3)],
                false,
            )
            .unwrap();
        assert_eq!((l[0].unit.as_str(), l[0].max), ("h100", 16));
        assert_eq!((l[1].unit.as_str(), l[1].max), ("a10g", 3));
        assert_eq!(c.to_aws(&"h100".into(), 16), ("ml.p5.48xlarge".into(), 2));
        // 8 a10g GPUs show as 2 of the larger type; 3 only as the 1-GPU type.
        assert_eq!(c.to_aws(&"a10g".into(), 8), ("ml.g5.12xlarge".into(), 2));
        assert_eq!(c.to_aws(&"a10g".into(), 3), ("ml.g5.xlarge".into(), 3));
        // A unit no type maps to shows as itself, in GPUs.
        assert_eq!(c.to_aws(&"a100".into(), 4), ("a100".into(), 4));
    }

    #[test]
    fn unknown_types_two_types_of_one_unit_and_bad_counts_are_refused() {
        let c = cap();
        let e = c
            .to_tranche("capacityLimits", &[lim("ml.x", 1)], false)
            .unwrap_err();
        assert!(
            e.message.contains("ml.x") && e.message.contains("ml.g5.xlarge"),
            "{}",
            e.message
        );
        let e = c
            .to_tranche(
                "capacityLimits",
                &[lim("ml.g5.xlarge", 1), lim("ml.g5.12xlarge", 1)],
                false,
            )
            .unwrap_err();
        assert!(e.message.contains("one limit per unit"), "{}", e.message);
        let e = c
            .to_tranche("capacityLimits", &[lim("ml.g5.xlarge", 0)], false)
            .unwrap_err();
        assert!(
            e.message.contains("capacityLimits.1.maxCapacity"),
            "{}",
            e.message
        );
        assert!(c
            .to_tranche("capacityLimits", &[lim("ml.g5.xlarge", 0)], true)
            .is_ok());
        let e = c
            .to_tranche("capacityLimits", &[lim("NUM_INSTANCES", 1)], false)
            .unwrap_err();
        assert!(
            e.message
                .contains("NUM_INSTANCES is only for a service environment"),
            "{}",
            e.message
        );
    }

    #[test]
    fn num_instances_is_that_many_of_each_units_largest_type() {
        let c = cap();
        let l = c
            .environment_limits("capacityLimits", &[lim("NUM_INSTANCES", 2)])
            .unwrap();
        let got: Vec<(&str, u32)> = l.iter().map(|l| (l.unit.as_str(), l.max)).collect();
        assert_eq!(got, [("a10g", 8), ("h100", 16)]);
        // Instance types still work, and NUM_INSTANCES stands alone.
        let l = c
            .environment_limits("capacityLimits", &[lim("ml.g5.xlarge", 3)])
            .unwrap();
        assert_eq!((l[0].unit.as_str(), l[0].max), ("a10g", 3));
        let e = c
            .environment_limits(
                "capacityLimits",
                &[lim("ml.g5.xlarge", 1), lim("NUM_INSTANCES", 1)],
            )
            .unwrap_err();
        assert!(
            e.message.contains("'capacityLimits.2.capacityUnit'")
                && e.message.contains("only capacity limit, got 2"),
            "{}",
            e.message
        );
        let e = c
            .environment_limits("capacityLimits", &[lim("NUM_INSTANCES", 0)])
            .unwrap_err();
        assert!(
            e.message.contains("'capacityLimits.1.maxCapacity'") && e.message.contains("got 0"),
            "{}",
            e.message
        );
        let none = Capacity {
            types: BTreeMap::new(),
        };
        let e = none
            .environment_limits("capacityLimits", &[lim("NUM_INSTANCES", 1)])
            .unwrap_err();
        assert!(e.message.contains("has none"), "{}", e.message);
    }
}
