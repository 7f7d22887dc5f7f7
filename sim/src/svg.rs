//! A run's timeline as a picture: one lane per client, lock intervals, faults, writes.

use std::collections::BTreeMap;
use std::fmt::Write;

use crate::options::Options;
use crate::report::SeedReport;

/// Draws `report` (recorded with its timeline) as an SVG document.
#[must_use]
pub fn timeline_svg(opts: &Options, report: &SeedReport) -> String {
    let end = report
        .timeline
        .iter()
        .map(|e| e.at)
        .max()
        .unwrap_or(1)
        .max(1);
    let (left, width, lane) = (90.0, 1100.0, 46.0);
    let x = |t: u64| left + width * (t as f64) / (end as f64);
    let height = lane * (opts.clients as f64 + 1.5) + 30.0;
    let colors = [
        "#4e79a7", "#f28e2b", "#59a14f", "#e15759", "#b07aa1", "#76b7b2",
    ];
    let mut out = String::new();
    let _ = writeln!(
        out,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{height}" font-family="monospace" font-size="11">"#,
        w = left + width + 20.0
    );
    let _ = writeln!(out, r#"<rect width="100%" height="100%" fill="white"/>"#);
    let _ = writeln!(
        out,
        r#"<text x="10" y="16">seed {} — {} — {} violation(s)</text>"#,
        report.seed,
        report.mix,
        report.violations.len()
    );
    for c in 0..opts.clients {
        let y = 30.0 + lane * c as f64;
        let _ = writeln!(out, r#"<text x="10" y="{}">client {c}</text>"#, y + 22.0);
        let _ = writeln!(
            out,
            r##"<line x1="{left}" y1="{}" x2="{}" y2="{}" stroke="#ddd"/>"##,
            y + 30.0,
            left + width,
            y + 30.0
        );
    }
    // Holding intervals, per client and resource (a client may hold several at once, each
    // drawn in its own band): from "holds rN" to "releases rN"/"stops trusting rN"/"crashes".
    let mut open: Vec<BTreeMap<String, (u64, String)>> = vec![BTreeMap::new(); opts.clients];
    let band = |resource: &str| {
        let n: usize = resource.trim_start_matches('r').parse().unwrap_or(0);
        4.0 * (n % 4) as f64
    };
    for e in &report.timeline {
        let Some(c) = e.client else { continue };
        let y = 30.0 + lane * c as f64;
        let word = |prefix: &str| {
            e.what
                .strip_prefix(prefix)
                .and_then(|rest| rest.split([',', ':', ' ']).next())
                .map(str::to_string)
        };
        let closed: Vec<(String, (u64, String))> = if let Some(rest) = e.what.strip_prefix("holds ")
        {
            let resource = rest.split(',').next().unwrap_or("").to_string();
            open[c].insert(resource, (e.at, rest.to_string()));
            Vec::new()
        } else if e.what == "crashes" {
            std::mem::take(&mut open[c]).into_iter().collect()
        } else if let Some(resource) = word("releases ").or_else(|| word("stops trusting ")) {
            open[c]
                .remove(&resource)
                .map(|o| (resource, o))
                .into_iter()
                .collect()
        } else {
            Vec::new()
        };
        for (resource, (from, label)) in closed {
            let color = colors[label
                .as_bytes()
                .get(1)
                .map_or(0, |b| usize::from(*b) % colors.len())];
            let _ = writeln!(
                out,
                r#"<rect x="{}" y="{}" width="{}" height="8" fill="{color}" opacity="0.7"><title>{label}</title></rect>"#,
                x(from),
                y + 10.0 + band(&resource),
                (x(e.at) - x(from)).max(1.0)
            );
            let _ = writeln!(
                out,
                r#"<text x="{}" y="{}" font-size="9">{}</text>"#,
                x(from) + 2.0,
                y + 8.0,
                resource
            );
        }
        if let Some(rest) = e.what.strip_prefix("pauses for ") {
            let length: u64 = rest
                .split(' ')
                .next()
                .and_then(|n| n.parse().ok())
                .unwrap_or(0);
            let _ = writeln!(
                out,
                r##"<rect x="{}" y="{}" width="{}" height="24" fill="#999" opacity="0.35"><title>{}</title></rect>"##,
                x(e.at),
                y + 6.0,
                (x(e.at + length) - x(e.at)).max(1.0),
                e.what
            );
        } else if e.what == "crashes" {
            let _ = writeln!(
                out,
                r##"<text x="{}" y="{}" fill="#c00">✖</text>"##,
                x(e.at),
                y + 42.0
            );
        } else if e.what.starts_with("write") {
            let ok = e.what.contains("accepted");
            let fill = if ok { "#2a2" } else { "#c00" };
            let _ = writeln!(
                out,
                r#"<circle cx="{}" cy="{}" r="2.5" fill="{fill}"><title>{}</title></circle>"#,
                x(e.at),
                y + 32.0,
                e.what
            );
        }
    }
    // Locks still held when the run ended.
    for (c, held) in open.iter().enumerate() {
        for (resource, (from, label)) in held {
            let y = 30.0 + lane * c as f64;
            let _ = writeln!(
                out,
                r##"<rect x="{}" y="{}" width="{}" height="8" fill="#4e79a7" opacity="0.7"><title>{label}</title></rect>"##,
                x(*from),
                y + 10.0 + band(resource),
                (x(end) - x(*from)).max(1.0)
            );
        }
    }
    let vy = 30.0 + lane * opts.clients as f64 + 10.0;
    for v in &report.violations {
        let _ = writeln!(
            out,
            r##"<line x1="{0}" y1="30" x2="{0}" y2="{vy}" stroke="#c00" stroke-dasharray="3,2"><title>{1:?}: {2}</title></line>"##,
            x(v.at),
            v.kind,
            v.detail
        );
    }
    let _ = writeln!(
        out,
        r#"<text x="{left}" y="{}">0 ms</text><text x="{}" y="{}" text-anchor="end">{end} ms (bars: locks held, label = resource and fence; dots: writes, green accepted, red rejected; grey: pause, ✖ crash; red dashes: violations)</text>"#,
        vy + 14.0,
        left + width,
        vy + 14.0
    );
    out.push_str("</svg>\n");
    out
}
