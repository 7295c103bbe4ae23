//! `tranche report` on `tranche dev`: the GPU time it reports for a share is exactly
//! the time its jobs' attempts held GPUs, and the JSON's percentages are of the unit's
//! capacity.

mod common;

use std::time::Duration;

use serde_json::Value;
use tranche_local::wait_until_blocking;

use common::{ok, tranche, Dev};

#[test]
fn the_report_counts_exactly_what_the_jobs_held() {
    let dev = Dev::start("tester");
    let c = dev.user.clone();
    let jobs: Vec<String> = (0..2)
        .map(|_| {
            ok(
                &c,
                &[
                    "submit",
                    "--share",
                    "vision",
                    "--gpus",
                    "2",
                    "--parsable",
                    "--",
                    "sleep",
                    "1",
                ],
            )
        })
        .collect();
    let mut held_ms = 0u64;
    for j in &jobs {
        let v: Value = wait_until_blocking("the job ended", Duration::from_secs(60), || {
            let v: Value = serde_json::from_str(&ok(&c, &["show", j, "--json"])).unwrap();
            if v["status"] == "SUCCEEDED" {
                Ok(v)
            } else {
                Err(v["status"].to_string())
            }
        })
        .unwrap();
        let a = &v["attempts"][0];
        held_ms += (a["ended_at"].as_u64().unwrap() - a["scheduled_at"].as_u64().unwrap()) * 2;
    }
    assert!(
        held_ms >= 4_000,
        "two 1-second jobs on 2 GPUs: {held_ms} ms"
    );
    let r: Value = serde_json::from_str(&ok(&c, &["report", "--json", "--since", "1h"])).unwrap();
    let row = r["rows"]
        .as_array()
        .unwrap()
        .iter()
        .find(|row| row["share"] == "vision")
        .unwrap_or_else(|| panic!("no row for vision: {r}"))
        .clone();
    let h = |k: &str| row["gpu_hours"][k].as_f64().unwrap();
    let counted = ((h("used") + h("borrowed")) * 3_600_000.0).round() as u64;
    assert_eq!(counted, held_ms, "{row}");
    let unit = row["unit"].as_str().unwrap();
    let cap = r["capacity_gpu_hours"][unit].as_f64().unwrap();
    assert!(cap > 0.0, "{r}");
    let pct = row["percent_of_capacity"]["used"].as_f64().unwrap();
    assert!((pct - h("used") * 100.0 / cap).abs() < 1e-9, "{row}");
    // By user: the same GPU time, under the submitting user.
    let r: Value = serde_json::from_str(&ok(&c, &["report", "--json", "--by", "user"])).unwrap();
    let mine: f64 = r["rows"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|row| row["user"] == "tester")
        .map(|row| {
            row["gpu_hours"]["used"].as_f64().unwrap()
                + row["gpu_hours"]["borrowed"].as_f64().unwrap()
        })
        .sum();
    assert_eq!((mine * 3_600_000.0).round() as u64, held_ms);
    let text = ok(&c, &["report"]);
    assert!(
        text.contains("vision") && text.contains("GPU-hours"),
        "{text}"
    );
    let out = tranche(&c, &["report", "--since", "yesterday"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("--since `yesterday`"),
        "{out:?}"
    );
}
