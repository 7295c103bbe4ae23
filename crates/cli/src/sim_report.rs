//! `tranche sim --report DIR`: the figures as JSON, the plots as PNG and SVG, and an
//! HTML page that shows them.

use crate::cmd::sim::Run;
use std::path::{Path, PathBuf};
use tranche_sim::plot::{self, Plot};
use tranche_sim::report::{fmt_duration, fmt_mean, strategy_name, Figures};

/// Fonts looked for when `TRANCHE_FONT` is not set (Debian, Fedora, Arch, macOS).
const FONTS: [&str; 6] = [
    "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf",
    "/usr/share/fonts/dejavu/DejaVuSans.ttf",
    "/usr/share/fonts/TTF/DejaVuSans.ttf",
    "/usr/share/fonts/truetype/liberation/LiberationSans-Regular.ttf",
    "/usr/share/fonts/liberation-sans/LiberationSans-Regular.ttf",
    "/Library/Fonts/Arial.ttf",
];

/// Reads and registers the labels' font once.
fn font() -> Result<(), String> {
    static DONE: std::sync::OnceLock<Result<(), String>> = std::sync::OnceLock::new();
    DONE.get_or_init(|| {
        let candidates: Vec<PathBuf> = match std::env::var_os("TRANCHE_FONT") {
            Some(p) => vec![PathBuf::from(p)],
            None => FONTS.iter().map(PathBuf::from).collect(),
        };
        for p in &candidates {
            if let Ok(bytes) = std::fs::read(p) {
                let bytes: &'static [u8] = Box::leak(bytes.into_boxed_slice());
                return plot::use_font(bytes).map_err(|e| format!("{}: {e}", p.display()));
            }
        }
        Err(format!(
            "no font for the plots' labels (looked for {}); set TRANCHE_FONT to a .ttf file",
            candidates
                .iter()
                .map(|p| p.display().to_string())
                .collect::<Vec<_>>()
                .join(", ")
        ))
    })
    .clone()
}

/// The short name a run's files start with: `policy`, `static`, `pooled`.
fn slug(i: usize) -> &'static str {
    ["policy", "static", "pooled"]
        .get(i)
        .copied()
        .unwrap_or("run")
}

fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

pub fn write(dir: &Path, trace: &Path, runs: &[Run]) -> Result<(), String> {
    let io = |e: std::io::Error| format!("cannot write in {}: {e}", dir.display());
    std::fs::create_dir_all(dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    let j = crate::cmd::sim::json(runs);
    std::fs::write(dir.join("figures.json"), format!("{j:#}\n")).map_err(io)?;
    let pairs: Vec<(&str, &Figures)> = runs
        .iter()
        .map(|r| (r.label.as_str(), &r.figures))
        .collect();
    // (file stem, title) of each plot written, per section.
    let mut sections: Vec<(String, Vec<(String, String)>)> = vec![];
    let plots_ok = match font() {
        Ok(()) => true,
        Err(e) => {
            eprintln!("tranche sim: the report has no plots: {e}");
            false
        }
    };
    if plots_ok {
        if runs.len() > 1 {
            let plots = [Plot::CompareUsage(&pairs), Plot::CompareWaits(&pairs)];
            sections.push(("The policies compared".into(), draw(dir, "", &plots)?));
        }
        for (i, r) in runs.iter().enumerate() {
            let (s, f) = (&r.setup, &r.figures);
            let plots = [
                Plot::Usage(s, f),
                Plot::Queue(s, f),
                Plot::Waits(s, f),
                Plot::Preemptions(f),
            ];
            let prefix = format!("{}-", slug(i));
            sections.push((r.label.clone(), draw(dir, &prefix, &plots)?));
        }
    }
    std::fs::write(dir.join("index.html"), html(trace, runs, &sections)).map_err(io)
}

fn draw(dir: &Path, prefix: &str, plots: &[Plot<'_>]) -> Result<Vec<(String, String)>, String> {
    let io = |e: std::io::Error| format!("cannot write in {}: {e}", dir.display());
    let mut out = vec![];
    for p in plots {
        let stem = format!("{prefix}{}", p.name());
        std::fs::write(dir.join(format!("{stem}.svg")), p.svg()?).map_err(io)?;
        std::fs::write(dir.join(format!("{stem}.png")), p.png()?).map_err(io)?;
        out.push((stem, p.title().to_string()));
    }
    Ok(out)
}

fn html(trace: &Path, runs: &[Run], sections: &[(String, Vec<(String, String)>)]) -> String {
    use std::fmt::Write;
    let mut h = String::new();
    let title = format!("Tranche simulation of {}", trace.display());
    let _ = write!(
        h,
        "<!doctype html>\n<html><head><meta charset=\"utf-8\"><title>{t}</title>\n<style>\
         body{{font-family:sans-serif;margin:2em;max-width:1000px}}\
         table{{border-collapse:collapse;margin:1em 0}}\
         td,th{{border:1px solid #ccc;padding:3px 8px;text-align:right}}\
         td:first-child,th:first-child{{text-align:left}}\
         img{{max-width:100%}}</style></head><body>\n<h1>{t}</h1>\n",
        t = esc(&title)
    );
    if runs.len() > 1 {
        h.push_str("<h2>Side by side</h2>\n<table><tr><th>policy</th><th>utilization</th><th>while jobs wait</th><th>mean wait</th><th>p50 wait</th><th>p99 wait</th><th>preempted attempts</th><th>GPU-hours lost</th><th>room at arrival / started late</th></tr>\n");
        for r in runs {
            let f = &r.figures;
            let _ = writeln!(
                h,
                "<tr><td>{}</td><td>{:.1}%</td><td>{:.1}%</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{:.1}</td><td>{} / {}</td></tr>",
                esc(&r.label),
                f.utilization * 100.0,
                f.utilization_while_waiting * 100.0,
                fmt_mean(f.wait.mean),
                fmt_duration(f.wait.p50),
                fmt_duration(f.wait.p99),
                f.preempted_attempts,
                f.lost_gpu_hours,
                f.room_at_arrival,
                f.started_late
            );
        }
        h.push_str("</table>\n");
        if let Some(sec) = sections.first() {
            plots_html(&mut h, sec);
        }
    }
    for (i, r) in runs.iter().enumerate() {
        let f = &r.figures;
        let _ = writeln!(h, "<h2>{}</h2>", esc(&r.label));
        let _ = writeln!(
            h,
            "<p>{} jobs on {} GPUs over {}; utilization {:.1}% over the makespan, {:.1}% while jobs wait; \
             mean wait {}, p99 {}; {} preempted attempts ({:.1} GPU-hours lost); \
             {} jobs had room in their share at arrival, {} of them waited past grace + 1 s. \
             Simulated in {:.2} s ({} scheduling passes).</p>",
            f.jobs,
            f.total_gpus,
            fmt_duration(f.makespan_ms),
            f.utilization * 100.0,
            f.utilization_while_waiting * 100.0,
            fmt_mean(f.wait.mean),
            fmt_duration(f.wait.p99),
            f.preempted_attempts,
            f.lost_gpu_hours,
            f.room_at_arrival,
            f.started_late,
            r.wall_s,
            r.passes
        );
        h.push_str("<table><tr><th>share</th><th>max</th><th>strategy</th><th>jobs</th><th>mean wait</th><th>p50</th><th>p99</th><th>GPU-hours</th><th>borrowed</th><th>lent</th><th>preempted</th><th>room / late</th></tr>\n");
        for s in &f.shares {
            let _ = writeln!(
                h,
                "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{:.1}</td><td>{:.1}</td><td>{:.1}</td><td>{}</td><td>{} / {}</td></tr>",
                esc(&s.name),
                s.max,
                strategy_name(s.strategy),
                s.jobs,
                fmt_mean(s.wait.mean),
                fmt_duration(s.wait.p50),
                fmt_duration(s.wait.p99),
                s.gpu_hours,
                s.borrowed_gpu_hours,
                s.lent_gpu_hours,
                s.preempted_attempts,
                s.room_at_arrival,
                s.started_late
            );
        }
        h.push_str("</table>\n");
        // The comparison's plots come first, then each run's.
        if let Some(sec) = sections.get(i + usize::from(runs.len() > 1)) {
            plots_html(&mut h, sec);
        }
    }
    h.push_str("<p>Figures: <a href=\"figures.json\">figures.json</a>. Made by <code>tranche sim</code>.</p>\n</body></html>\n");
    h
}

fn plots_html(h: &mut String, sec: &(String, Vec<(String, String)>)) {
    use std::fmt::Write;
    for (stem, title) in &sec.1 {
        let _ = writeln!(
            h,
            "<figure><img src=\"{stem}.svg\" alt=\"{t}\"><figcaption>{t} (<a href=\"{stem}.png\">PNG</a>)</figcaption></figure>",
            t = esc(title)
        );
    }
}
