//! The report's plots, drawn with `plotters` as SVG text or PNG bytes: GPUs in use
//! over time stacked by share (own and borrowed), queue length per share over time,
//! the wait CDF per share, preemptions over time; and for a comparison, the wait CDF
//! and GPUs in use of each policy.
//!
//! Labels need a TrueType font: [`use_font`] registers one (the caller reads it).

use crate::report::{Figures, Setup};
use plotters::coord::types::RangedCoordf64;
use plotters::coord::Shift;
use plotters::prelude::*;
use tranche_model::{Millis, SECOND};

pub const WIDTH: u32 = 960;
pub const HEIGHT: u32 = 420;
const FONT: &str = "sans-serif";

/// Why a plot could not be drawn.
#[derive(Debug, thiserror::Error)]
pub enum PlotError {
    /// The bytes given to [`use_font`] are no font.
    #[error("the font file is not a TrueType or OpenType font")]
    Font,
    /// The drawing backend failed (its error, in words).
    #[error("cannot draw: {0}")]
    Draw(String),
    #[error("cannot encode the PNG: {0}")]
    Png(#[from] png::EncodingError),
}

/// Registers the font the labels are drawn with; call once before drawing.
pub fn use_font(bytes: &'static [u8]) -> Result<(), PlotError> {
    plotters::style::register_font(FONT, FontStyle::Normal, bytes).map_err(|_| PlotError::Font)
}

/// One plot: a title and a drawing function over any backend.
pub enum Plot<'a> {
    Usage(&'a Setup, &'a Figures),
    Queue(&'a Setup, &'a Figures),
    Waits(&'a Setup, &'a Figures),
    Preemptions(&'a Figures),
    /// (policy label, figures) of each policy.
    CompareWaits(&'a [(&'a str, &'a Figures)]),
    CompareUsage(&'a [(&'a str, &'a Figures)]),
}

/// Distinct colours for up to 20 shares (then they repeat).
fn color(i: usize) -> RGBColor {
    const C: [(u8, u8, u8); 10] = [
        (31, 119, 180),
        (255, 127, 14),
        (44, 160, 44),
        (214, 39, 40),
        (148, 103, 189),
        (140, 86, 75),
        (227, 119, 194),
        (127, 127, 127),
        (188, 189, 34),
        (23, 190, 207),
    ];
    let (r, g, b) = C[i % C.len()];
    if i / C.len() % 2 == 1 {
        RGBColor(r / 2 + 64, g / 2 + 64, b / 2 + 64)
    } else {
        RGBColor(r, g, b)
    }
}

/// A lighter shade, for borrowed GPUs.
fn light(c: RGBColor) -> RGBColor {
    let l = |x: u8| (x as u16 + (255 - x as u16) * 3 / 5) as u8;
    RGBColor(l(c.0), l(c.1), l(c.2))
}

/// The time axis's unit for a span: (divisor in ms, name).
fn time_unit(span: Millis) -> (f64, &'static str) {
    if span >= 3 * 86_400 * SECOND {
        (86_400_000.0, "days")
    } else if span >= 3 * 3600 * SECOND {
        (3_600_000.0, "hours")
    } else if span >= 3 * 60 * SECOND {
        (60_000.0, "minutes")
    } else {
        (1000.0, "seconds")
    }
}

type Res = Result<(), PlotError>;

fn e<E: std::fmt::Display>(x: E) -> PlotError {
    PlotError::Draw(x.to_string())
}

impl Plot<'_> {
    /// The file name the plot is written under, without extension.
    pub fn name(&self) -> &'static str {
        match self {
            Plot::Usage(..) => "usage",
            Plot::Queue(..) => "queue",
            Plot::Waits(..) => "waits",
            Plot::Preemptions(..) => "preemptions",
            Plot::CompareWaits(..) => "compare-waits",
            Plot::CompareUsage(..) => "compare-usage",
        }
    }

    pub fn title(&self) -> &'static str {
        match self {
            Plot::Usage(..) => "GPUs in use by share (solid: within max, light: borrowed)",
            Plot::Queue(..) => "Jobs waiting per share",
            Plot::Waits(..) => "Wait (submit to first start), cumulative share of jobs",
            Plot::Preemptions(..) => "Preempted attempts over time",
            Plot::CompareWaits(..) => "Wait of every job, by policy",
            Plot::CompareUsage(..) => "GPUs in use, by policy",
        }
    }

    pub fn svg(&self) -> Result<String, PlotError> {
        let mut s = String::new();
        {
            let root = SVGBackend::with_string(&mut s, (WIDTH, HEIGHT)).into_drawing_area();
            self.draw(&root)?;
            root.present().map_err(e)?;
        }
        Ok(s)
    }

    /// The plot as a PNG file's bytes.
    pub fn png(&self) -> Result<Vec<u8>, PlotError> {
        let mut rgb = vec![0u8; (WIDTH * HEIGHT * 3) as usize];
        {
            let root = BitMapBackend::with_buffer(&mut rgb, (WIDTH, HEIGHT)).into_drawing_area();
            self.draw(&root)?;
            root.present().map_err(e)?;
        }
        encode_png(&rgb, WIDTH, HEIGHT)
    }

    fn draw<DB: DrawingBackend>(&self, root: &DrawingArea<DB, Shift>) -> Res
    where
        DB::ErrorType: 'static,
    {
        root.fill(&WHITE).map_err(e)?;
        match self {
            Plot::Usage(setup, f) => usage(root, self.title(), setup, f),
            Plot::Queue(setup, f) => queue(root, self.title(), setup, f),
            Plot::Waits(setup, f) => {
                let names: Vec<&str> = setup.shares.iter().map(|s| s.name.as_str()).collect();
                let lines: Vec<(&str, &[Millis])> = names
                    .iter()
                    .zip(&f.waits)
                    .filter(|(_, w)| !w.is_empty())
                    .map(|(n, w)| (*n, w.as_slice()))
                    .collect();
                cdf(root, self.title(), &lines)
            }
            Plot::Preemptions(f) => preemptions(root, self.title(), f),
            Plot::CompareWaits(runs) => {
                let all: Vec<(&str, Vec<Millis>)> = runs
                    .iter()
                    .map(|(n, f)| {
                        let mut w: Vec<Millis> = f.waits.iter().flatten().copied().collect();
                        w.sort_unstable();
                        (*n, w)
                    })
                    .collect();
                let lines: Vec<(&str, &[Millis])> =
                    all.iter().map(|(n, w)| (*n, w.as_slice())).collect();
                cdf(root, self.title(), &lines)
            }
            Plot::CompareUsage(runs) => compare_usage(root, self.title(), runs),
        }
    }
}

fn chart_x(f: &Figures) -> (f64, &'static str, f64) {
    let (div, unit) = time_unit(f.makespan_ms);
    (div, unit, (f.makespan_ms as f64 / div).max(1e-3))
}

fn xfmt(v: &f64) -> String {
    if v.fract().abs() < 1e-9 {
        format!("{v:.0}")
    } else {
        format!("{v:.1}")
    }
}

fn bucket_x(f: &Figures, b: usize, div: f64) -> f64 {
    (b as f64 + 0.5) * f.series.bucket_ms as f64 / div
}

fn usage<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    title: &str,
    setup: &Setup,
    f: &Figures,
) -> Res
where
    DB::ErrorType: 'static,
{
    let (div, unit, xmax) = chart_x(f);
    let n = f.series.preemptions.len();
    // Layers bottom to top: each share's own GPUs, then its borrowed ones.
    let mut layers: Vec<(Vec<f64>, RGBColor, String)> = vec![];
    let mut acc = vec![0.0; n];
    for (i, s) in setup.shares.iter().enumerate() {
        for (k, v) in [(0, &f.series.own[i]), (1, &f.series.borrowed[i])] {
            for b in 0..n {
                acc[b] += v[b];
            }
            let c = if k == 0 { color(i) } else { light(color(i)) };
            let label = if k == 0 {
                s.name.clone()
            } else {
                String::new()
            };
            layers.push((acc.clone(), c, label));
        }
    }
    let ymax = (f.total_gpus as f64).max(acc.iter().copied().fold(0.0, f64::max)) * 1.05;
    let mut ch = time_chart(root, title, unit, xmax, ymax.max(1.0), "GPUs")?;
    // Drawn top layer first, so each lower one covers the part below it.
    for (vals, c, label) in layers.iter().rev() {
        let pts: Vec<(f64, f64)> = (0..n).map(|b| (bucket_x(f, b, div), vals[b])).collect();
        let s = ch
            .draw_series(AreaSeries::new(pts, 0.0, c.filled()))
            .map_err(e)?;
        if !label.is_empty() {
            let c = *c;
            s.label(label.as_str())
                .legend(move |(x, y)| Rectangle::new([(x, y - 5), (x + 12, y + 5)], c.filled()));
        }
    }
    let total = f.total_gpus as f64;
    ch.draw_series(LineSeries::new(
        [(0.0, total), (xmax, total)],
        BLACK.stroke_width(1),
    ))
    .map_err(e)?
    .label(format!("{} GPUs", f.total_gpus))
    .legend(|(x, y)| PathElement::new([(x, y), (x + 12, y)], BLACK));
    legend(&mut ch, SeriesLabelPosition::UpperRight)
}

/// A chart over time: the title, the time axis in `unit` up to `xmax`, and counts up
/// to `ymax` on the y axis.
fn time_chart<'a, DB: DrawingBackend + 'a>(
    root: &'a DrawingArea<DB, Shift>,
    title: &str,
    unit: &str,
    xmax: f64,
    ymax: f64,
    y_desc: impl Into<String>,
) -> Result<ChartContext<'a, DB, Cartesian2d<RangedCoordf64, RangedCoordf64>>, PlotError>
where
    DB::ErrorType: 'static,
{
    let mut ch = ChartBuilder::on(root)
        .caption(title, (FONT, 18))
        .margin(10)
        .x_label_area_size(36)
        .y_label_area_size(56)
        .build_cartesian_2d(0.0..xmax, 0.0..ymax)
        .map_err(e)?;
    ch.configure_mesh()
        .x_desc(format!("time ({unit})"))
        .x_label_formatter(&xfmt)
        .y_desc(y_desc)
        .y_label_formatter(&|v| format!("{v:.0}"))
        .label_style((FONT, 13))
        .draw()
        .map_err(e)?;
    Ok(ch)
}

fn legend<'a, DB: DrawingBackend + 'a, X: Ranged, Y: Ranged>(
    ch: &mut ChartContext<'a, DB, Cartesian2d<X, Y>>,
    at: SeriesLabelPosition,
) -> Res
where
    DB::ErrorType: 'static,
{
    ch.configure_series_labels()
        .position(at)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK.mix(0.3))
        .label_font((FONT, 12))
        .draw()
        .map_err(e)
}

fn queue<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    title: &str,
    setup: &Setup,
    f: &Figures,
) -> Res
where
    DB::ErrorType: 'static,
{
    let (div, unit, xmax) = chart_x(f);
    let n = f.series.preemptions.len();
    let ymax = f
        .series
        .queued
        .iter()
        .flatten()
        .copied()
        .fold(0.0, f64::max)
        .max(1.0)
        * 1.05;
    let mut ch = time_chart(root, title, unit, xmax, ymax, "jobs waiting (average)")?;
    for (i, s) in setup.shares.iter().enumerate() {
        if f.series.queued[i].iter().all(|v| *v == 0.0) {
            continue;
        }
        let c = color(i);
        let pts: Vec<(f64, f64)> = (0..n)
            .map(|b| (bucket_x(f, b, div), f.series.queued[i][b]))
            .collect();
        ch.draw_series(LineSeries::new(pts, c.stroke_width(2)))
            .map_err(e)?
            .label(s.name.as_str())
            .legend(move |(x, y)| PathElement::new([(x, y), (x + 12, y)], c.stroke_width(2)));
    }
    legend(&mut ch, SeriesLabelPosition::UpperRight)
}

/// Cumulative distributions of waits, on a log scale of seconds (waits under a
/// second are drawn at the axis's start).
fn cdf<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    title: &str,
    lines: &[(&str, &[Millis])],
) -> Res
where
    DB::ErrorType: 'static,
{
    let lo = 0.1f64;
    let hi = lines
        .iter()
        .filter_map(|(_, w)| w.last())
        .max()
        .map_or(10.0, |m| (*m as f64 / 1000.0).max(10.0))
        * 1.5;
    let mut ch = ChartBuilder::on(root)
        .caption(title, (FONT, 18))
        .margin(10)
        .x_label_area_size(36)
        .y_label_area_size(56)
        .build_cartesian_2d((lo..hi).log_scale(), 0.0..1.0)
        .map_err(e)?;
    ch.configure_mesh()
        .x_desc("wait (log scale)")
        .y_desc("share of jobs")
        .x_label_formatter(&|v| crate::report::fmt_duration((*v * 1000.0).round() as Millis))
        .y_label_formatter(&|v| format!("{:.0}%", v * 100.0))
        .label_style((FONT, 13))
        .draw()
        .map_err(e)?;
    for (i, (name, w)) in lines.iter().enumerate() {
        if w.is_empty() {
            continue;
        }
        let c = color(i);
        let n = w.len() as f64;
        // One point per distinct wait (at most 2,000, evenly through the jobs).
        let step = (w.len() / 2000).max(1);
        let mut pts = vec![(lo, 0.0)];
        for k in (0..w.len()).step_by(step).chain([w.len() - 1]) {
            let x = (w[k] as f64 / 1000.0).max(lo);
            pts.push((x, pts.last().map_or(0.0, |p| p.1)));
            pts.push((x, (k + 1) as f64 / n));
        }
        pts.push((hi, 1.0));
        ch.draw_series(LineSeries::new(pts, c.stroke_width(2)))
            .map_err(e)?
            .label(*name)
            .legend(move |(x, y)| PathElement::new([(x, y), (x + 12, y)], c.stroke_width(2)));
    }
    legend(&mut ch, SeriesLabelPosition::LowerRight)
}

fn preemptions<DB: DrawingBackend>(root: &DrawingArea<DB, Shift>, title: &str, f: &Figures) -> Res
where
    DB::ErrorType: 'static,
{
    let (div, unit, xmax) = chart_x(f);
    let ymax = f
        .series
        .preemptions
        .iter()
        .copied()
        .max()
        .unwrap_or(0)
        .max(1) as f64
        * 1.1;
    let per = crate::report::fmt_duration(f.series.bucket_ms);
    let mut ch = time_chart(
        root,
        title,
        unit,
        xmax,
        ymax,
        format!("preempted attempts per {per}"),
    )?;
    let w = f.series.bucket_ms as f64 / div;
    ch.draw_series(
        f.series
            .preemptions
            .iter()
            .enumerate()
            .filter(|(_, n)| **n > 0)
            .map(|(b, n)| {
                let x0 = b as f64 * w;
                Rectangle::new([(x0, 0.0), (x0 + w, *n as f64)], color(3).filled())
            }),
    )
    .map_err(e)?;
    Ok(())
}

fn compare_usage<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    title: &str,
    runs: &[(&str, &Figures)],
) -> Res
where
    DB::ErrorType: 'static,
{
    let span = runs.iter().map(|r| r.1.makespan_ms).max().unwrap_or(1);
    let (div, unit) = time_unit(span);
    let xmax = (span as f64 / div).max(1e-3);
    let ymax = runs.iter().map(|r| r.1.total_gpus).max().unwrap_or(1) as f64 * 1.05;
    let mut ch = time_chart(root, title, unit, xmax, ymax, "GPUs in use (average)")?;
    for (i, (name, f)) in runs.iter().enumerate() {
        let c = color(i);
        let n = f.series.preemptions.len();
        let pts: Vec<(f64, f64)> = (0..n)
            .map(|b| {
                let used: f64 = (0..f.series.own.len())
                    .map(|s| f.series.own[s][b] + f.series.borrowed[s][b])
                    .sum();
                (bucket_x(f, b, div), used)
            })
            .collect();
        ch.draw_series(LineSeries::new(pts, c.stroke_width(2)))
            .map_err(e)?
            .label(*name)
            .legend(move |(x, y)| PathElement::new([(x, y), (x + 12, y)], c.stroke_width(2)));
    }
    legend(&mut ch, SeriesLabelPosition::LowerRight)
}

fn encode_png(rgb: &[u8], w: u32, h: u32) -> Result<Vec<u8>, PlotError> {
    let mut out = vec![];
    {
        let mut enc = png::Encoder::new(&mut out, w, h);
        enc.set_color(png::ColorType::Rgb);
        enc.set_depth(png::BitDepth::Eight);
        let mut wr = enc.write_header()?;
        wr.write_image_data(rgb)?;
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bytes_that_are_no_font_are_refused() {
        let e = use_font(b"not a font").unwrap_err();
        assert!(matches!(e, PlotError::Font), "{e:?}");
        assert_eq!(
            e.to_string(),
            "the font file is not a TrueType or OpenType font"
        );
    }
}
