//! How the report writes numbers and command lists: durations, rates and counts with
//! readable units, and command sequences with their repeats folded.

/// A command sequence with repeats folded: `aggregate, [aggregate, update] x2, delete`.
#[must_use]
pub fn fold_repeats(items: &[String]) -> String {
    // The block of 1 to 4 items starting at `i` whose back-to-back repeats cover the most.
    let best_at = |i: usize| {
        let mut best = (1, 1);
        for width in 1..=4.min(items.len().saturating_sub(i)) {
            let block = &items[i..i + width];
            let mut count = 1;
            while items[i + count * width..]
                .get(..width)
                .is_some_and(|next| next == block)
            {
                count += 1;
            }
            if count > 1 && width * count > best.0 * best.1 {
                best = (width, count);
            }
        }
        best
    };
    let mut parts = Vec::new();
    let mut i = 0;
    while i < items.len() {
        let (width, count) = best_at(i);
        let (w_next, c_next) = best_at(i + 1);
        if i + 1 < items.len() && c_next > 1 && w_next * c_next > width * count {
            // Folding from the next item covers more: keep this one as it is.
            parts.push(items[i].clone());
            i += 1;
            continue;
        }
        let block = items[i..i + width].join(", ");
        parts.push(match (width, count) {
            (_, 1) => block,
            (1, _) => format!("{block} x{count}"),
            _ => format!("[{block}] x{count}"),
        });
        i += width * count;
    }
    parts.join(", ")
}

/// Distinct lines in first-seen order, each with its count when above one.
#[must_use]
pub fn fold_duplicates(items: &[String]) -> Vec<String> {
    let mut seen: Vec<(&String, usize)> = Vec::new();
    for item in items {
        match seen.iter_mut().find(|(s, _)| *s == item) {
            Some((_, n)) => *n += 1,
            None => seen.push((item, 1)),
        }
    }
    seen.into_iter()
        .map(|(s, n)| {
            if n > 1 {
                format!("{s} (x{n})")
            } else {
                s.clone()
            }
        })
        .collect()
}

pub(crate) fn fmt_us(us: f64) -> String {
    fmt_ns(us * 1e3)
}

/// A duration in ns with a readable unit.
#[must_use]
pub fn fmt_ns(ns: f64) -> String {
    if ns < 1e3 {
        format!("{ns:.0} ns")
    } else if ns < 1e6 {
        format!("{:.2} µs", ns / 1e3)
    } else if ns < 1e9 {
        format!("{:.2} ms", ns / 1e6)
    } else {
        format!("{:.2} s", ns / 1e9)
    }
}

pub(crate) fn fmt_opt_ns(ns: Option<f64>) -> String {
    ns.map_or_else(|| "-".into(), fmt_ns)
}

/// A rate per second with an SI prefix (`2.50 M`).
#[must_use]
pub fn fmt_rate(per_sec: f64) -> String {
    human_format::Formatter::new().format(per_sec)
}

/// A count that is usually whole: `3`, or `3.50` when it is not.
#[must_use]
pub fn fmt_num(x: f64) -> String {
    if (x - x.round()).abs() < 1e-9 {
        format!("{x:.0}")
    } else {
        format!("{x:.2}")
    }
}
