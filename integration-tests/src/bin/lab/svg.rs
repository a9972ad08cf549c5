//! The lab's chart: the median time to the critical response's first complete DATA frame,
//! one group of bars per workload and urgencies, one bar per case (plotters, SVG).

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
    use plotters::prelude::*;
    use plotters::style::text_anchor::{HPos, Pos, VPos};

    let rows = summarize(config, results);
    let mut groups: Vec<(Workload, Urgencies)> = Vec::new();
    for r in &rows {
        if !groups.contains(&(r.workload, r.urgencies)) {
            groups.push((r.workload, r.urgencies));
        }
    }
    let cases: Vec<&str> = config.cases.iter().map(Case::name).collect();
    let color = |ci: usize| {
        let (r, g, b) = COLORS[ci % COLORS.len()];
        RGBColor(r, g, b)
    };
    let width = (260 + groups.len() * cases.len() * 48).max(900) as u32;
    let root = SVGBackend::new(path, (width, 640)).into_drawing_area();
    root.fill(&WHITE)?;
    // Title and legend above the plot, so neither ever covers a bar.
    let (header, body) = root.split_vertically(84);
    header.draw(&Text::new(
        "Critical 4 KiB response: first complete DATA frame, median per case (whiskers: min-max)",
        (width as i32 / 2, 12),
        TextStyle::from(("sans-serif", 21).into_font()).pos(Pos::new(HPos::Center, VPos::Top)),
    ))?;
    let legend_style =
        TextStyle::from(("sans-serif", 15).into_font()).pos(Pos::new(HPos::Left, VPos::Center));
    let item_width = |name: &str| 22 + name.chars().count() as i32 * 8 + 28;
    let legend_width: i32 = cases.iter().map(|c| item_width(c)).sum();
    let mut x = (width as i32 - legend_width).max(0) / 2;
    for (ci, case) in cases.iter().enumerate() {
        header.draw(&Rectangle::new([(x, 52), (x + 16, 68)], color(ci).filled()))?;
        header.draw(&Text::new(
            case.to_string(),
            (x + 22, 60),
            legend_style.clone(),
        ))?;
        x += item_width(case);
    }
    let top = rows
        .iter()
        .map(|r| r.critical_complete_ms.max)
        .fold(1.0, f64::max)
        * 1.08;
    let mut chart = ChartBuilder::on(&body)
        .margin(16)
        .margin_top(8)
        .x_label_area_size(70)
        .y_label_area_size(70)
        .build_cartesian_2d(0f64..groups.len().max(1) as f64, 0f64..top)?;
    let x_desc = format!(
        "workload / urgencies   ({}; {} repeats, seed {})",
        config.describe_link(),
        config.repeats,
        config.seed
    );
    chart
        .configure_mesh()
        .disable_x_mesh()
        .x_labels(0)
        .y_labels(12)
        .y_label_formatter(&|v| format!("{v:.0}"))
        .light_line_style(WHITE)
        .y_desc("ms from the critical request")
        .x_desc(x_desc)
        .axis_desc_style(("sans-serif", 16))
        .label_style(("sans-serif", 14))
        .draw()?;
    let slot = 0.8 / cases.len().max(1) as f64;
    let value_style =
        TextStyle::from(("sans-serif", 12).into_font()).pos(Pos::new(HPos::Center, VPos::Bottom));
    for (ci, case) in cases.iter().enumerate() {
        let bars: Vec<(f64, Spread)> = groups
            .iter()
            .enumerate()
            .filter_map(|(gi, &(w, u))| {
                rows.iter()
                    .find(|row| row.workload == w && row.urgencies == u && row.case == *case)
                    .map(|row| (gi as f64 + 0.1 + ci as f64 * slot, row.critical_complete_ms))
            })
            .collect();
        chart.draw_series(bars.iter().map(|&(x, s)| {
            Rectangle::new(
                [(x + slot * 0.08, 0.0), (x + slot * 0.92, s.median)],
                color(ci).filled(),
            )
        }))?;
        chart.draw_series(bars.iter().map(|&(x, s)| {
            PathElement::new(
                vec![(x + slot / 2.0, s.min), (x + slot / 2.0, s.max)],
                BLACK.stroke_width(1),
            )
        }))?;
        chart.draw_series(bars.iter().map(|&(x, s)| {
            Text::new(
                format!("{:.0}", s.median),
                (x + slot / 2.0, s.max.max(s.median) + top * 0.005),
                value_style.clone(),
            )
        }))?;
    }
    let group_style =
        TextStyle::from(("sans-serif", 15).into_font()).pos(Pos::new(HPos::Center, VPos::Top));
    for (gi, (w, u)) in groups.iter().enumerate() {
        let (px, py) = chart.backend_coord(&(gi as f64 + 0.5, 0.0));
        root.draw(&Text::new(
            format!("{w} / {u}"),
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
