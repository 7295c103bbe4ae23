//! `tranche-agent`, the Tranche node agent. This crate holds its GPU inventory: one
//! trait, two backends (`nvml` for real GPUs, `fake` for machines without them).

pub mod cli;
pub mod config;
pub mod daemon;
pub mod exec;
pub mod inventory;
pub mod launch;
pub mod users;
