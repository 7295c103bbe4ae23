//! Capacity in AWS's terms (instances of an instance type) and in Tranche's (GPUs of a
//! capacity unit), through `[aws.instance_types]`.
//!
//! In: `{capacityUnit: "ml.g5.xlarge", maxCapacity: 3}` with `ml.g5.xlarge = {unit =
//! "a10g", gpus = 1}` is a limit of 3 GPUs of `a10g`. Out: a unit's limit is shown in
//! the instance type of that unit with the most GPUs that divides it evenly (ties: the
//! first by name); a unit no instance type maps to is shown as itself, counting GPUs.

use std::collections::BTreeMap;

use serde::Deserialize;
use serde_json::{json, Value};
use tranche_model::{CapacityLimit, Unit};

use super::wire::{AwsError, AwsResult};
use tranche_controller::config::InstanceType;

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
            None if name == "NUM_INSTANCES" => Err(AwsError::invalid(
                member,
                "capacityUnit NUM_INSTANCES is not supported: Tranche counts capacity per instance type; use one of the instance types its admin configured: "
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

    fn known(&self) -> String {
        if self.types.is_empty() {
            "none".into()
        } else {
            self.types.keys().cloned().collect::<Vec<_>>().join(", ")
        }
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
        assert!(e.message.contains("NUM_INSTANCES"), "{}", e.message);
    }
}
