//! The lab's charts (plotters, SVG): grouped bars of medians with min-max whiskers
//! ([`draw_grouped_bars`]); for the priority workloads ([`write_svg`]) the median time to
//! the critical response's first complete DATA frame, one group of bars per workload and
//! urgencies, one bar per case.

use std::path::Path;

use integration_tests::workload::{Case, RunResult, Urgencies, Workload};
use integration_tests::BoxError;

use crate::args::LabConfig;
use crate::stats::{summarize, Spread};

/// Bar colours, one per case in order (enough for our five cases and the five peers).
const COLORS: [(u8, u8, u8); 12] = [
    (120, 120, 120),
    (190, 170, 140),
    (66, 133, 244),
    (244, 160, 0),
    (15, 157, 88),
    (171, 71, 188),
    (219, 68, 55),
    (0, 172, 193),
    (124, 179, 66),
    (121, 85, 72),
    (236, 64, 122),
    (40, 53, 147),
];

/// Draws the median `critical_complete_ms` of every cell as grouped bars (one group per
/// workload and urgencies, one bar per case, whiskers from min to max) into an SVG file.
pub fn write_svg(path: &Path, config: &LabConfig, results: &[RunResult]) -> Result<(), BoxError> {
    let rows = summarize(config, results);
    let mut groups: Vec<(Workload, Urgencies)> = Vec::new();
    for r in &rows {
        if !groups.contains(&(r.workload, r.urgencies)) {
            groups.push((r.workload, r.urgencies));
        }
    }
    let cases: Vec<&str> = config.cases.iter().map(Case::name).collect();
    let bars = rows
        .iter()
        .filter_map(|row| {
            let group = groups
                .iter()
                .position(|&g| g == (row.workload, row.urgencies))?;
            let series = cases.iter().position(|&c| c == row.case)?;
            Some((group, series, row.critical_complete_ms))
        })
        .collect();
    draw_grouped_bars(
        path,
        &GroupedBars {
            title: "Critical 4 KiB response: first complete DATA frame, median per case \
                    (whiskers: min-max)"
                .into(),
            y_desc: "ms from the critical request".into(),
            x_desc: format!(
                "workload / urgencies   ({}; {} repeats, seed {})",
                config.describe_link(),
                config.repeats,
                config.seed
            ),
            groups: groups.iter().map(|(w, u)| format!("{w} / {u}")).collect(),
            series: cases.iter().map(|c| c.to_string()).collect(),
            bars,
        },
    )
}

/// A grouped bar chart: one group of bars per entry of `groups` along the x axis, one bar
/// per entry of `series` in each group (in its colour, named in the legend), each bar a
/// median with whiskers from min to max.
#[derive(Debug, Clone)]
pub struct GroupedBars {
    /// The title above the legend.
    pub title: String,
    /// The y axis's description (its unit).
    pub y_desc: String,
    /// The x axis's description.
    pub x_desc: String,
    /// The groups' labels, in order along the x axis.
    pub groups: Vec<String>,
    /// The series' names, in order within each group and in the legend.
    pub series: Vec<String>,
    /// The bars: (index into `groups`, index into `series`, the spread drawn); a group
    /// without a bar for a series leaves its slot empty.
    pub bars: Vec<(usize, usize, Spread)>,
}

/// Bar colour of the series at `index`.
fn color(index: usize) -> plotters::style::RGBColor {
    let (r, g, b) = COLORS[index % COLORS.len()];
    plotters::style::RGBColor(r, g, b)
}

/// The title and, under it, the legend (one coloured square and name per series).
fn draw_header(
    header: &plotters::drawing::DrawingArea<
        plotters::prelude::SVGBackend<'_>,
        plotters::coord::Shift,
    >,
    chart: &GroupedBars,
    width: u32,
) -> Result<(), BoxError> {
    use plotters::prelude::*;
    use plotters::style::text_anchor::{HPos, Pos, VPos};

    header.draw(&Text::new(
        chart.title.clone(),
        (width as i32 / 2, 12),
        TextStyle::from(("sans-serif", 21).into_font()).pos(Pos::new(HPos::Center, VPos::Top)),
    ))?;
    let legend_style =
        TextStyle::from(("sans-serif", 15).into_font()).pos(Pos::new(HPos::Left, VPos::Center));
    let item_width = |name: &str| 22 + name.chars().count() as i32 * 8 + 28;
    let legend_width: i32 = chart.series.iter().map(|c| item_width(c)).sum();
    let mut x = (width as i32 - legend_width).max(0) / 2;
    for (ci, case) in chart.series.iter().enumerate() {
        header.draw(&Rectangle::new([(x, 52), (x + 16, 68)], color(ci).filled()))?;
        header.draw(&Text::new(
            case.to_string(),
            (x + 22, 60),
            legend_style.clone(),
        ))?;
        x += item_width(case);
    }
    Ok(())
}

/// Draws `chart` into an SVG file at `path` (plotters): title and legend above the plot,
/// so neither ever covers a bar; each bar labelled with its median.
pub fn draw_grouped_bars(path: &Path, chart: &GroupedBars) -> Result<(), BoxError> {
    use plotters::prelude::*;
    use plotters::style::text_anchor::{HPos, Pos, VPos};

    let (groups, cases) = (&chart.groups, &chart.series);
    let width = (260 + groups.len() * cases.len() * 48).max(900) as u32;
    let root = SVGBackend::new(path, (width, 640)).into_drawing_area();
    root.fill(&WHITE)?;
    let (header, body) = root.split_vertically(84);
    draw_header(&header, chart, width)?;
    let top = chart.bars.iter().map(|(_, _, s)| s.max).fold(1.0, f64::max) * 1.08;
    let mut plot = ChartBuilder::on(&body)
        .margin(16)
        .margin_top(8)
        .x_label_area_size(70)
        .y_label_area_size(70)
        .build_cartesian_2d(0f64..groups.len().max(1) as f64, 0f64..top)?;
    plot.configure_mesh()
        .disable_x_mesh()
        .x_labels(0)
        .y_labels(12)
        .y_label_formatter(&|v| format!("{v:.0}"))
        .light_line_style(WHITE)
        .y_desc(chart.y_desc.as_str())
        .x_desc(chart.x_desc.as_str())
        .axis_desc_style(("sans-serif", 16))
        .label_style(("sans-serif", 14))
        .draw()?;
    let slot = 0.8 / cases.len().max(1) as f64;
    let value_style =
        TextStyle::from(("sans-serif", 12).into_font()).pos(Pos::new(HPos::Center, VPos::Bottom));
    for ci in 0..cases.len() {
        let bars: Vec<(f64, Spread)> = chart
            .bars
            .iter()
            .filter(|&&(_, series, _)| series == ci)
            .map(|&(gi, _, s)| (gi as f64 + 0.1 + ci as f64 * slot, s))
            .collect();
        plot.draw_series(bars.iter().map(|&(x, s)| {
            Rectangle::new(
                [(x + slot * 0.08, 0.0), (x + slot * 0.92, s.median)],
                color(ci).filled(),
            )
        }))?;
        plot.draw_series(bars.iter().map(|&(x, s)| {
            PathElement::new(
                vec![(x + slot / 2.0, s.min), (x + slot / 2.0, s.max)],
                BLACK.stroke_width(1),
            )
        }))?;
        plot.draw_series(bars.iter().map(|&(x, s)| {
            Text::new(
                format!("{:.0}", s.median),
                (x + slot / 2.0, s.max.max(s.median) + top * 0.005),
                value_style.clone(),
            )
        }))?;
    }
    let group_style =
        TextStyle::from(("sans-serif", 15).into_font()).pos(Pos::new(HPos::Center, VPos::Top));
    for (gi, label) in groups.iter().enumerate() {
        let (px, py) = plot.backend_coord(&(gi as f64 + 0.5, 0.0));
        root.draw(&Text::new(
            label.clone(),
            (px, py + 10),
            group_style.clone(),
        ))?;
    }
    root.present()?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stats::tests::three_repeats;

    #[test]
    fn chart_has_the_title_the_groups_and_the_cases() {
        let (config, results) = three_repeats();
        let svg = std::env::temp_dir().join(format!("lab-test-{}.svg", std::process::id()));
        write_svg(&svg, &config, &results).unwrap();
        let text = std::fs::read_to_string(&svg).unwrap();
        std::fs::remove_file(&svg).ok();
        assert!(text.contains("first complete DATA frame"));
        assert!(text.contains("late / explicit"));
        assert!(text.contains("scheduled"));
    }
}
