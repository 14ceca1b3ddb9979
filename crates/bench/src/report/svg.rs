//! The report as a hand-written SVG bar chart (docs/benchmarks.svg).

use std::fmt::Write as _;

use super::format::{ms, rps};
use super::{PassRow, Report};

fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

fn color(via: &str) -> &'static str {
    match via {
        "direct" => "#8c8c8c",
        "plangate" => "#2b6cb0",
        "candidate" => "#7fb2e5",
        _ => "#dd8a2e",
    }
}

struct Bar {
    label: String,
    value: f64,
    whisker: Option<f64>,
    color: &'static str,
    text: String,
}

/// One panel of horizontal bars on a log scale (values span several
/// orders of magnitude: a stalled call next to a direct one), gridlines
/// at powers of ten; returns the height used.
fn panel(
    out: &mut String,
    x0: f64,
    y0: f64,
    width: f64,
    title: &str,
    unit: &str,
    bars: &[Bar],
) -> f64 {
    let label_w = 300.0;
    let row_h = 20.0;
    let plot_w = width - label_w - 150.0;
    let values = bars
        .iter()
        .flat_map(|b| [Some(b.value), b.whisker])
        .flatten()
        .filter(|v| v.is_finite() && *v > 0.0);
    let (mut lo, mut hi) = (f64::INFINITY, 0.0_f64);
    for v in values {
        lo = lo.min(v);
        hi = hi.max(v);
    }
    if !lo.is_finite() {
        (lo, hi) = (1.0, 10.0);
    }
    let lo = 10f64.powf(lo.log10().floor());
    let hi = 10f64.powf(hi.log10().ceil()).max(lo * 10.0);
    let x_of = |v: f64| {
        if v.is_finite() && v > 0.0 {
            (v.max(lo).log10() - lo.log10()) / (hi.log10() - lo.log10()) * plot_w
        } else {
            0.0
        }
    };
    let _ = writeln!(
        out,
        r#"<text x="{x0}" y="{}" font-weight="bold" font-size="13">{}</text>"#,
        y0 + 14.0,
        esc(title)
    );
    let top = y0 + 24.0;
    let bottom = top + row_h * bars.len() as f64;
    let mut tick = lo;
    while tick <= hi * 1.0001 {
        let x = x0 + label_w + x_of(tick);
        let text = if tick >= 1.0 {
            format!("{tick:.0}")
        } else {
            format!("{tick}")
        };
        let _ = writeln!(
            out,
            r##"<line x1="{x:.1}" y1="{top}" x2="{x:.1}" y2="{bottom}" stroke="#ddd" stroke-width="1"/><text x="{x:.1}" y="{}" font-size="9" fill="#666" text-anchor="middle">{text}{unit}</text>"##,
            bottom + 10.0
        );
        tick *= 10.0;
    }
    let mut y = top;
    for b in bars {
        let w = x_of(b.value);
        let _ = writeln!(
            out,
            r#"<text x="{}" y="{}" font-size="11" text-anchor="end">{}</text>"#,
            x0 + label_w - 6.0,
            y + 13.0,
            esc(&b.label)
        );
        let _ = writeln!(
            out,
            r#"<rect x="{}" y="{}" width="{w:.1}" height="{}" fill="{}"/>"#,
            x0 + label_w,
            y + 3.0,
            row_h - 6.0,
            b.color
        );
        let mut text_x = x0 + label_w + w + 4.0;
        if let Some(wv) = b.whisker.filter(|v| v.is_finite() && *v > 0.0) {
            let wx = x0 + label_w + x_of(wv);
            let cy = y + row_h / 2.0;
            let _ = writeln!(
                out,
                r##"<line x1="{:.1}" y1="{cy}" x2="{wx:.1}" y2="{cy}" stroke="#333" stroke-width="1"/><line x1="{wx:.1}" y1="{}" x2="{wx:.1}" y2="{}" stroke="#333" stroke-width="1"/>"##,
                x0 + label_w + w,
                cy - 4.0,
                cy + 4.0
            );
            text_x = text_x.max(wx + 4.0);
        }
        let _ = writeln!(
            out,
            r##"<text x="{text_x:.1}" y="{}" font-size="10" fill="#222">{}</text>"##,
            y + 13.0,
            esc(&b.text)
        );
        y += row_h;
    }
    bottom + 14.0 - y0
}

/// `main`, or "candidate" for the other build (labels stay short).
fn short(build: &str) -> &str {
    if build == "main" { "main" } else { "candidate" }
}

/// A passthrough row's bar: labelled and coloured by its configuration,
/// so the latency and throughput panels name each row alike.
fn pass_bar(p: &PassRow, value: f64, whisker: Option<f64>, text: String) -> Bar {
    Bar {
        label: format!("{} → {} → {}", p.client, p.label, p.upstream),
        value,
        whisker,
        color: color(&p.via),
        text,
    }
}

/// Draws a panel below the last (none when it has no bars), moving `y`
/// past it.
fn add_panel(body: &mut String, y: &mut f64, width: f64, title: &str, unit: &str, bars: &[Bar]) {
    if !bars.is_empty() {
        *y += panel(body, 10.0, *y, width - 20.0, title, unit, bars) + 16.0;
    }
}

/// A bar chart: passthrough p50 (whisker to p99) per configuration, one
/// client and concurrent; throughput with concurrent clients.
pub fn svg(r: &Report) -> String {
    let width = 1000.0;
    let mut body = String::new();
    let mut y = 40.0;
    // The chart shows the usual concurrency (16), not the many-clients row.
    let conc = match r.meta.settings.concurrent_clients {
        0 => r.passthrough.iter().map(|p| p.clients).max().unwrap_or(16),
        n => n,
    };
    for (clients, title) in [
        (
            1,
            "Passthrough latency, 1 client: p50 bar, whisker to p99 (log scale)".to_owned(),
        ),
        (
            conc,
            format!(
                "Passthrough latency, {conc} concurrent clients: p50 bar, whisker to p99 (log scale)"
            ),
        ),
    ] {
        let bars = latency_bars(r, clients);
        add_panel(&mut body, &mut y, width, &title, " ms", &bars);
    }
    let bars: Vec<Bar> = r
        .passthrough
        .iter()
        .filter(|p| p.clients == conc)
        .map(|p| {
            let text = format!("{}/s", rps(p.m.throughput_rps));
            pass_bar(p, p.m.throughput_rps, None, text)
        })
        .collect();
    add_panel(
        &mut body,
        &mut y,
        width,
        &format!("Throughput, {conc} concurrent clients (calls/s, log scale)"),
        "/s",
        &bars,
    );
    add_panel(
        &mut body,
        &mut y,
        width,
        "Planned writes and get_plan over HTTP (p50 bar, whisker to p99; log scale)",
        " ms",
        &plan_bars(r),
    );
    frame(r, width, y + 24.0, &body)
}

/// Passthrough p50 with a whisker to p99, for the rows with `clients`.
fn latency_bars(r: &Report, clients: usize) -> Vec<Bar> {
    r.passthrough
        .iter()
        .filter(|p| p.clients == clients)
        .map(|p| {
            let text = format!(
                "{} ms{}",
                ms(p.m.p50_ms),
                p.ratio_p50.map_or(String::new(), |r| format!(" ({r:.2}×)"))
            );
            pass_bar(p, p.m.p50_ms, Some(p.m.p99_ms), text)
        })
        .collect()
}

/// Planned writes per store and build, then `get_plan` at each scale point.
fn plan_bars(r: &Report) -> Vec<Bar> {
    let mut bars = Vec::new();
    for p in &r.planning {
        bars.push(Bar {
            label: format!(
                "write · {} · {} key{} · {}",
                p.store,
                p.keys,
                if p.keys > 1 { "s" } else { "" },
                short(&p.build)
            ),
            value: p.write.p50_ms,
            whisker: Some(p.write.p99_ms),
            color: if p.build == "main" {
                "#2b6cb0"
            } else {
                "#7fb2e5"
            },
            text: format!("{} ms ({:.2}× a read)", ms(p.write.p50_ms), p.ratio_p50),
        });
    }
    if let Some(s) = &r.scale {
        for p in &s.points {
            bars.push(Bar {
                label: format!(
                    "get_plan · {} keys with plans · {}",
                    p.keys,
                    short(&s.build)
                ),
                value: p.get_plan.p50_ms,
                whisker: Some(p.get_plan.p99_ms),
                color: "#4a9a5a",
                text: format!("{} ms", ms(p.get_plan.p50_ms)),
            });
        }
    }
    bars
}

/// The document around the panels: size, title, legend and footer.
fn frame(r: &Report, width: f64, height: f64, body: &str) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height:.0}" viewBox="0 0 {width} {height:.0}" font-family="Helvetica, Arial, sans-serif">"#
    );
    let _ = writeln!(out, r#"<rect width="100%" height="100%" fill="white"/>"#);
    let _ = writeln!(
        out,
        r#"<text x="10" y="22" font-size="15" font-weight="bold">plangate benchmark — {}{}</text>"#,
        esc(&r.meta.started),
        if r.meta.quick { " (quick run)" } else { "" }
    );
    let _ = writeln!(
        out,
        r##"<g font-size="11"><rect x="520" y="12" width="10" height="10" fill="#8c8c8c"/><text x="534" y="21">direct</text><rect x="580" y="12" width="10" height="10" fill="#2b6cb0"/><text x="594" y="21">plangate (main)</text><rect x="690" y="12" width="10" height="10" fill="#7fb2e5"/><text x="704" y="21">plangate candidate</text><rect x="820" y="12" width="10" height="10" fill="#dd8a2e"/><text x="834" y="21">peer bridge</text></g>"##
    );
    out.push_str(body);
    let _ = writeln!(
        out,
        r##"<text x="10" y="{:.0}" font-size="10" fill="#555">{} cores, shared machine; interleaved rounds; medians of round p50s. Full data: docs/benchmarks.json</text>"##,
        height - 8.0,
        r.meta.machine.cores
    );
    out.push_str("</svg>\n");
    out
}
