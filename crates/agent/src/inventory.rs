//! GPU inventory behind one trait, with two backends: `nvml` (the real GPUs, through
//! NVIDIA's management library) and `fake` (GPUs declared in the config, for machines
//! without GPUs, for `tranche dev`, tests and simulations). The rest of the agent sees
//! only [`GpuInfo`] and cannot tell the two apart.

use std::collections::BTreeMap;

use nvml_wrapper::error::NvmlError;
use serde::Serialize;
use tranche_model::{Gpu, GpuIndex, Unit, MAX_GPUS_PER_NODE_INVENTORY};

/// One GPU as the agent sees it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct GpuInfo {
    pub index: GpuIndex,
    pub uuid: String,
    /// The product name NVML reports, e.g. "NVIDIA H100 80GB HBM3".
    pub product: String,
    pub pci_bus_id: String,
    pub memory_mb: u64,
    /// `None` where the GPU has no MIG support.
    pub mig_enabled: Option<bool>,
    /// Uncorrected ECC errors since the driver loaded; `None` where ECC is unsupported.
    pub ecc_uncorrected: Option<u64>,
    /// Why the GPU is unhealthy, if it is.
    pub unhealthy: Option<String>,
}

impl GpuInfo {
    /// The GPU as the controller's model records it.
    pub fn to_model(&self, unit: Unit) -> Gpu {
        Gpu {
            index: self.index,
            uuid: self.uuid.clone(),
            unit,
            memory_mb: self.memory_mb,
            healthy: self.unhealthy.is_none(),
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum InventoryError {
    /// The NVML library or the driver is missing: the agent must not pretend.
    #[error(
        "cannot read GPUs through NVML: {detail}. Install the NVIDIA driver (it provides \
         libnvidia-ml.so.1) and check that `nvidia-smi` works; on a machine without GPUs \
         use the fake backend instead: `inventory = \"fake\"` with `fake = \"8 x h100\"` in the \
         agent config (or `--backend fake --fake \"8 x h100\"`)"
    )]
    NvmlUnavailable { detail: String },
    #[error("NVML: {what}: {detail}")]
    Nvml { what: String, detail: String },
    #[error("fake: `{spec}`: {rule}")]
    FakeSpec { spec: String, rule: String },
    #[error(
        "GPU {index} is a \"{product}\", which no capacity unit names: add \
         `\"{product}\" = \"<unit>\"` under [units] in the agent config, or set the node \
         label `tranche.unit`"
    )]
    UnmappedProduct { index: GpuIndex, product: String },
}

/// Where the agent reads its GPUs from.
pub trait Inventory: Send + Sync {
    /// Every GPU of the node, by index, with its health as of now.
    fn gpus(&self) -> Result<Vec<GpuInfo>, InventoryError>;
    /// The backend's name, for logs.
    fn backend(&self) -> &'static str;
}

/// Product name → capacity unit, from the agent config's `[units]` table, with a node
/// label `tranche.unit` that overrides it for every GPU of the node.
#[derive(Debug, Clone, Default)]
pub struct UnitMap {
    pub by_product: BTreeMap<String, String>,
    pub node_override: Option<String>,
}

impl UnitMap {
    pub fn unit_for(&self, gpu: &GpuInfo) -> Result<Unit, InventoryError> {
        if let Some(u) = &self.node_override {
            return Ok(u.as_str().into());
        }
        self.by_product
            .get(&gpu.product)
            .map(|u| u.as_str().into())
            .ok_or_else(|| InventoryError::UnmappedProduct {
                index: gpu.index,
                product: gpu.product.clone(),
            })
    }
}

// ---- fake ---------------------------------------------------------------------------

/// GPUs declared in the config: `"8 x h100"`, or several groups `"4 x h100, 4 x a100"`.
/// A fake GPU's product name is its unit, so the unit map is not needed for it.
pub struct FakeInventory {
    gpus: Vec<GpuInfo>,
}

impl FakeInventory {
    pub fn parse(spec: &str, node: &str) -> Result<FakeInventory, InventoryError> {
        let bad = |rule: &str| InventoryError::FakeSpec {
            spec: spec.to_string(),
            rule: rule.to_string(),
        };
        let count_rule =
            format!("COUNT must be a whole number, 1 to {MAX_GPUS_PER_NODE_INVENTORY}");
        let mut gpus = Vec::new();
        for group in spec.split(',') {
            let group = group.trim();
            let (n, unit) = group
                .split_once('x')
                .ok_or_else(|| bad("each group is `COUNT x UNIT`, e.g. `8 x h100`"))?;
            let n: u32 = n.trim().parse().map_err(|_| bad(&count_rule))?;
            let unit = unit.trim();
            if n == 0 || n as usize > MAX_GPUS_PER_NODE_INVENTORY {
                return Err(bad(&count_rule));
            }
            if Unit::from(unit).validate("unit").is_err() {
                return Err(bad("UNIT must be a capacity unit name such as `h100`"));
            }
            for _ in 0..n {
                let index = gpus.len() as u32;
                gpus.push(GpuInfo {
                    index: GpuIndex(index),
                    uuid: format!("GPU-fake-{node}-{index}"),
                    product: unit.to_string(),
                    pci_bus_id: format!("00000000:{:02X}:00.0", 0x10 + index),
                    memory_mb: 81_920,
                    mig_enabled: Some(false),
                    ecc_uncorrected: Some(0),
                    unhealthy: None,
                });
            }
        }
        if gpus.len() > MAX_GPUS_PER_NODE_INVENTORY {
            return Err(bad(&format!(
                "a node has at most {MAX_GPUS_PER_NODE_INVENTORY} GPUs"
            )));
        }
        Ok(FakeInventory { gpus })
    }

    /// Marks a fake GPU unhealthy (tests of the drain-on-unhealthy path).
    pub fn set_unhealthy(&mut self, index: GpuIndex, why: &str) {
        if let Some(g) = self.gpus.iter_mut().find(|g| g.index == index) {
            g.unhealthy = Some(why.to_string());
        }
    }

    /// The unit map a fake node needs: each product is its own unit.
    pub fn unit_map(&self) -> UnitMap {
        UnitMap {
            by_product: self
                .gpus
                .iter()
                .map(|g| (g.product.clone(), g.product.clone()))
                .collect(),
            node_override: None,
        }
    }
}

impl Inventory for FakeInventory {
    fn gpus(&self) -> Result<Vec<GpuInfo>, InventoryError> {
        Ok(self.gpus.clone())
    }
    fn backend(&self) -> &'static str {
        "fake"
    }
}

// ---- nvml ---------------------------------------------------------------------------

/// The real GPUs, through nvml-wrapper (libnvidia-ml is loaded at run time).
pub struct NvmlInventory {
    nvml: nvml_wrapper::Nvml,
    /// Critical Xid events seen since start, by GPU index (a watcher thread fills it).
    xids: std::sync::Arc<std::sync::Mutex<BTreeMap<GpuIndex, String>>>,
    /// Whether the Xid watcher could register for events (`None`: still starting).
    pub xid_watch: std::sync::Arc<std::sync::Mutex<Option<Result<usize, NvmlError>>>>,
}

/// Xid errors that applications cause (bad memory access, a killed context, and the
/// like): they say nothing about the GPU's health, as NVIDIA's device plugin also holds.
pub const APPLICATION_XIDS: [u64; 6] = [13, 31, 43, 45, 68, 109];

impl NvmlInventory {
    /// Loads NVML. Without the library or the driver this is the clear error of
    /// [`InventoryError::NvmlUnavailable`], never an empty node.
    pub fn open() -> Result<NvmlInventory, InventoryError> {
        match nvml_wrapper::Nvml::init() {
            Ok(nvml) => {
                let inv = NvmlInventory {
                    nvml,
                    xids: Default::default(),
                    xid_watch: Default::default(),
                };
                inv.watch_xids();
                Ok(inv)
            }
            Err(e) => Err(InventoryError::NvmlUnavailable {
                detail: e.to_string(),
            }),
        }
    }

    /// Starts a thread that waits for critical Xid and double-bit ECC events on every
    /// GPU that offers them, and records them; a recorded one makes its GPU unhealthy.
    fn watch_xids(&self) {
        use nvml_wrapper::bitmasks::event::EventTypes;
        use nvml_wrapper::enums::event::XidError;
        let xids = self.xids.clone();
        let status = self.xid_watch.clone();
        let _ = std::thread::Builder::new()
            .name("tranche-xid".into())
            .spawn(move || {
                let nvml = match nvml_wrapper::Nvml::init() {
                    Ok(n) => n,
                    Err(e) => {
                        *status.lock().unwrap() = Some(Err(e));
                        return;
                    }
                };
                let mut set = match nvml.create_event_set() {
                    Ok(s) => s,
                    Err(e) => {
                        *status.lock().unwrap() = Some(Err(e));
                        return;
                    }
                };
                let mut watched = 0;
                let n = nvml.device_count().unwrap_or(0);
                for i in 0..n {
                    let Ok(d) = nvml.device_by_index(i) else {
                        continue;
                    };
                    let want = EventTypes::CRITICAL_XID_ERROR | EventTypes::DOUBLE_BIT_ECC_ERROR;
                    let kinds = d
                        .supported_event_types()
                        .map(|k| k & want)
                        .unwrap_or(EventTypes::empty());
                    if kinds.is_empty() {
                        continue;
                    }
                    set = match d.register_events(kinds, set) {
                        Ok(s) => {
                            watched += 1;
                            s
                        }
                        Err(e) => {
                            *status.lock().unwrap() = Some(Err(e.error));
                            return;
                        }
                    };
                }
                *status.lock().unwrap() = Some(Ok(watched));
                if watched == 0 {
                    return;
                }
                loop {
                    let Ok(ev) = set.wait(5_000) else { continue };
                    let Ok(index) = ev.device.index() else {
                        continue;
                    };
                    let why = match ev.event_data {
                        Some(XidError::Value(x)) if APPLICATION_XIDS.contains(&x) => continue,
                        Some(XidError::Value(x)) => format!("Xid {x}"),
                        Some(XidError::Unknown) => "an unknown Xid error".to_string(),
                        None if ev.event_type.contains(EventTypes::DOUBLE_BIT_ECC_ERROR) => {
                            "a double-bit ECC error".to_string()
                        }
                        None => continue,
                    };
                    xids.lock().unwrap().insert(GpuIndex(index), why);
                }
            });
    }

    /// The driver's version, for the agent's registration and logs.
    pub fn driver_version(&self) -> Option<String> {
        self.nvml.sys_driver_version().ok()
    }
}

/// Why a GPU is unhealthy, if it is: uncorrected ECC errors since the driver loaded, or
/// a critical Xid (or double-bit ECC) event the watcher saw; both when both.
fn health(ecc_uncorrected: Option<u64>, xid: Option<&str>) -> Option<String> {
    let ecc = ecc_uncorrected
        .filter(|c| *c > 0)
        .map(|c| format!("{c} uncorrected ECC errors since the driver loaded"));
    match (ecc, xid) {
        (Some(e), Some(x)) => Some(format!("{e}; {x}")),
        (Some(e), None) => Some(e),
        (None, Some(x)) => Some(x.to_string()),
        (None, None) => None,
    }
}

fn nvml_err(
    what: impl Into<String>,
) -> impl FnOnce(nvml_wrapper::error::NvmlError) -> InventoryError {
    let what = what.into();
    move |e| InventoryError::Nvml {
        what,
        detail: e.to_string(),
    }
}

impl Inventory for NvmlInventory {
    fn gpus(&self) -> Result<Vec<GpuInfo>, InventoryError> {
        use nvml_wrapper::enum_wrappers::device::{EccCounter, MemoryError};
        use nvml_wrapper::error::NvmlError;
        let n = self
            .nvml
            .device_count()
            .map_err(nvml_err("counting GPUs"))?;
        let mut out = Vec::with_capacity(n as usize);
        for i in 0..n {
            let d = self
                .nvml
                .device_by_index(i)
                .map_err(nvml_err(format!("opening GPU {i}")))?;
            let uuid = d.uuid().map_err(nvml_err(format!("GPU {i} UUID")))?;
            let product = d.name().map_err(nvml_err(format!("GPU {i} name")))?;
            let pci_bus_id = d
                .pci_info()
                .map(|p| p.bus_id)
                .map_err(nvml_err(format!("GPU {i} PCI info")))?;
            let memory_mb = d
                .memory_info()
                .map(|m| m.total / (1024 * 1024))
                .map_err(nvml_err(format!("GPU {i} memory")))?;
            // Optional features: "not supported" is an answer, not an error.
            let mig_enabled = match d.mig_mode() {
                Ok(m) => Some(m.current == 1),
                Err(NvmlError::NotSupported) => None,
                Err(e) => return Err(nvml_err(format!("GPU {i} MIG mode"))(e)),
            };
            let ecc_uncorrected =
                match d.total_ecc_errors(MemoryError::Uncorrected, EccCounter::Volatile) {
                    Ok(c) => Some(c),
                    Err(NvmlError::NotSupported) => None,
                    Err(e) => return Err(nvml_err(format!("GPU {i} ECC counters"))(e)),
                };
            let xid = self.xids.lock().unwrap().get(&GpuIndex(i)).cloned();
            let unhealthy = health(ecc_uncorrected, xid.as_deref());
            out.push(GpuInfo {
                index: GpuIndex(i),
                uuid,
                product,
                pci_bus_id,
                memory_mb,
                mig_enabled,
                ecc_uncorrected,
                unhealthy,
            });
        }
        Ok(out)
    }
    fn backend(&self) -> &'static str {
        "nvml"
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_critical_xid_or_uncorrected_ecc_makes_a_gpu_unhealthy() {
        assert_eq!(health(None, None), None);
        assert_eq!(
            health(Some(0), None),
            None,
            "no errors, and no counter, are healthy"
        );
        assert_eq!(
            health(Some(0), Some("Xid 79")).as_deref(),
            Some("Xid 79"),
            "a critical Xid alone marks the GPU"
        );
        assert_eq!(
            health(Some(2), None).as_deref(),
            Some("2 uncorrected ECC errors since the driver loaded")
        );
        assert_eq!(
            health(Some(1), Some("Xid 48")).as_deref(),
            Some("1 uncorrected ECC errors since the driver loaded; Xid 48")
        );
    }

    #[test]
    fn fake_specs_parse_and_refuse_with_the_rule() {
        let f = FakeInventory::parse("4 x h100, 2 x a100", "n1").unwrap();
        let g = f.gpus().unwrap();
        assert_eq!(g.len(), 6);
        assert_eq!(g[5].index, GpuIndex(5));
        assert_eq!(g[0].product, "h100");
        assert_eq!(g[4].product, "a100");
        assert_eq!(g[5].uuid, "GPU-fake-n1-5");
        let map = f.unit_map();
        assert_eq!(map.unit_for(&g[4]).unwrap().as_str(), "a100");
        for bad in [
            "8 h100",
            "0 x h100",
            "x h100",
            "129 x h100",
            "100 x h100, 29 x a100",
            "8 x H 100",
        ] {
            let e = FakeInventory::parse(bad, "n1").err().unwrap().to_string();
            assert!(e.contains(bad), "{e}");
        }
        // A node standing for a whole pool (Kueue's benchmark: 120 GPUs a cohort).
        let big = FakeInventory::parse("120 x h100", "n1").unwrap();
        assert_eq!(big.gpus().unwrap().len(), 120);
    }

    #[test]
    fn an_unmapped_product_names_the_config_key() {
        let f = FakeInventory::parse("1 x h100", "n1").unwrap();
        let g = &f.gpus().unwrap()[0];
        let e = UnitMap::default().unit_for(g).unwrap_err().to_string();
        assert!(e.contains("[units]") && e.contains("h100"), "{e}");
        let map = UnitMap {
            by_product: BTreeMap::new(),
            node_override: Some("big".into()),
        };
        assert_eq!(map.unit_for(g).unwrap().as_str(), "big");
    }

    #[test]
    fn unhealthy_fake_gpus_are_reported() {
        let mut f = FakeInventory::parse("2 x h100", "n1").unwrap();
        f.set_unhealthy(GpuIndex(1), "Xid 79: GPU has fallen off the bus");
        let g = f.gpus().unwrap();
        assert!(!g[1].to_model("h100".into()).healthy);
        assert!(g[0].to_model("h100".into()).healthy);
    }
}
