//! The report of `tranche sim --report DIR`: the figures as JSON, the plots as PNG and
//! SVG, and an HTML page that shows them, as (file name, contents) for the caller to
//! write. The tables are [`report`]'s, the same the terminal shows.

use crate::plot::{Plot, PlotError};
use crate::report::{self, fmt_duration, fmt_mean, html_escape as esc};
use crate::runs::{self, Run};

/// The short name a run's files start with: `policy`, `static`, `pooled`.
fn slug(i: usize) -> &'static str {
    ["policy", "static", "pooled"]
        .get(i)
        .copied()
        .unwrap_or("run")
}

/// A section of the page: its title and the plots drawn for it, (file stem, title).
type Section = (String, Vec<(String, String)>);

/// The report's files for the runs of the trace `trace` (its name as the page shows
/// it): `figures.json`, `index.html` and, with `plots` (a font is registered, see
/// [`crate::plot::use_font`]), every plot as `.svg` and `.png`.
pub fn files(trace: &str, runs: &[Run], plots: bool) -> Result<Vec<(String, Vec<u8>)>, PlotError> {
    let j = runs::json(runs);
    let mut files = vec![("figures.json".to_string(), format!("{j:#}\n").into_bytes())];
    let pairs: Vec<(&str, &report::Figures)> = runs
        .iter()
        .map(|r| (r.label.as_str(), &r.figures))
        .collect();
    let mut sections: Vec<Section> = vec![];
    if plots {
        if runs.len() > 1 {
            let plots = [Plot::CompareUsage(&pairs), Plot::CompareWaits(&pairs)];
            sections.push((
                "The policies compared".into(),
                draw(&mut files, "", &plots)?,
            ));
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
            sections.push((r.label.clone(), draw(&mut files, &prefix, &plots)?));
        }
    }
    files.push((
        "index.html".into(),
        html(trace, runs, &sections).into_bytes(),
    ));
    Ok(files)
}

fn draw(
    files: &mut Vec<(String, Vec<u8>)>,
    prefix: &str,
    plots: &[Plot<'_>],
) -> Result<Vec<(String, String)>, PlotError> {
    let mut out = vec![];
    for p in plots {
        let stem = format!("{prefix}{}", p.name());
        files.push((format!("{stem}.svg"), p.svg()?.into_bytes()));
        files.push((format!("{stem}.png"), p.png()?));
        out.push((stem, p.title().to_string()));
    }
    Ok(out)
}

fn html(trace: &str, runs: &[Run], sections: &[Section]) -> String {
    use std::fmt::Write;
    let mut h = String::new();
    let title = format!("Tranche simulation of {trace}");
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
        h.push_str("<h2>Side by side</h2>\n");
        h.push_str(&report::comparison_table(&runs::labelled(runs)).html());
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
             mean wait {}, p99 {}; {} preempted attempts ({:.1} GPU-hours preempted, {:.1} of work lost); \
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
            f.work_lost_gpu_hours,
            f.room_at_arrival,
            f.started_late,
            r.wall_s,
            r.passes
        );
        h.push_str(&report::share_table(&f.shares).html());
        // The comparison's plots come first, then each run's.
        if let Some(sec) = sections.get(i + usize::from(runs.len() > 1)) {
            plots_html(&mut h, sec);
        }
    }
    h.push_str("<p>Figures: <a href=\"figures.json\">figures.json</a>. Made by <code>tranche sim</code>.</p>\n</body></html>\n");
    h
}

fn plots_html(h: &mut String, sec: &Section) {
    use std::fmt::Write;
    for (stem, title) in &sec.1 {
        let _ = writeln!(
            h,
            "<figure><img src=\"{stem}.svg\" alt=\"{t}\"><figcaption>{t} (<a href=\"{stem}.png\">PNG</a>)</figcaption></figure>",
            t = esc(title)
        );
    }
}
