//! Lengths of time as the command line reads and writes them.

use std::time::Duration;

/// Parses a positive duration such as `500ms`, `30s`, `5m` or `1h 30m`.
pub fn duration(s: &str) -> Result<Duration, String> {
    let d = humantime::parse_duration(s).map_err(|e| {
        format!("not a duration ({e}); write a number and a unit, such as 500ms, 30s, 5m or 1h")
    })?;
    if d.is_zero() {
        return Err("must be greater than zero".to_owned());
    }
    Ok(d)
}

/// A remaining TTL or a wait: `expired` (zero), `850ms`, `12.3s`, or `4m 10s` (whole
/// seconds from a minute).
pub fn format_ttl(ttl: Duration) -> String {
    if ttl.is_zero() {
        "expired".to_owned()
    } else if ttl < Duration::from_secs(1) {
        format!("{}ms", ttl.as_millis())
    } else if ttl < Duration::from_secs(60) {
        format!("{:.1}s", ttl.as_secs_f64())
    } else {
        humantime::format_duration(Duration::from_secs(ttl.as_secs())).to_string()
    }
}

/// A configured length of time, exactly to the millisecond: `2 s`, `1.5 s`, `500 ms`.
pub fn show(d: Duration) -> String {
    let ms = d.as_millis();
    if ms.is_multiple_of(1_000) {
        format!("{} s", ms / 1_000)
    } else if ms < 1_000 {
        format!("{ms} ms")
    } else {
        let secs = format!("{}.{:03}", ms / 1_000, ms % 1_000);
        format!("{} s", secs.trim_end_matches('0'))
    }
}
