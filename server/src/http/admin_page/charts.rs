//! Small charts for the operator's page, drawn on the server as inline SVG:
//! pure functions from numbers to markup, so they need no script, no
//! library and nothing fetched from elsewhere (the page's CSP allows none),
//! and can be tested as strings.
//!
//! Colours are SVG presentation attributes (`fill`, `stroke`), not `style=`
//! attributes. Every chart says what it shows in words as well: `role="img"`
//! with an `aria-label` and a `<title>` carrying the numbers, so a screen
//! reader (or a tooltip) gives the same facts the picture does; a chart with
//! nothing to show says so in visible text rather than drawing a flat line
//! that could pass for zeros.

use std::fmt::Write;

use super::html::Escaped;
use crate::db::relay_health::Latency;

/// The drawing area of every chart, in SVG user units (= CSS pixels).
const WIDTH: f64 = 240.0;
const HEIGHT: f64 = 40.0;
/// Room at the top for the scale's label.
const TOP: f64 = 10.0;

const INK: &str = "#1d4f7a";
const ALARM: &str = "#b42318";
const RULE: &str = "#8a96a3";

/// Deliveries per minute as bars, oldest minute first, scaled so the
/// busiest minute fills the height.
pub(super) fn deliveries_per_minute(per_minute: &[i64]) -> String {
    let counts: Vec<u64> = per_minute
        .iter()
        .map(|&n| u64::try_from(n).unwrap_or(0))
        .collect();
    let total: u64 = counts.iter().sum();
    let minutes = counts.len().max(1);
    if total == 0 {
        let words = format!("No deliveries in the last {}", span(minutes, "minute"));
        return empty(&format!("{words}."), &words);
    }
    let max = counts.iter().copied().max().unwrap_or(1).max(1);
    let last = counts.last().copied().unwrap_or(0);
    let label = format!(
        "Deliveries per minute over the last {}: {total} delivered, at most {max} in one \
         minute, {last} in the last minute.",
        span(minutes, "minute")
    );
    let mut svg = open(&label);
    let pitch = WIDTH / minutes as f64;
    let bar = (pitch * 0.75).max(0.5);
    let room = HEIGHT - TOP;
    for (i, &n) in counts.iter().enumerate() {
        if n == 0 {
            continue;
        }
        // At least a pixel, so a quiet minute next to a busy one still shows.
        let h = (n as f64 / max as f64 * room).max(1.0);
        let _ = write!(
            svg,
            "<rect x=\"{:.1}\" y=\"{:.1}\" width=\"{bar:.1}\" height=\"{h:.1}\" fill=\"{INK}\"/>",
            i as f64 * pitch,
            HEIGHT - h,
        );
    }
    let _ = write!(
        svg,
        "<line x1=\"0\" y1=\"{HEIGHT}\" x2=\"{WIDTH}\" y2=\"{HEIGHT}\" stroke=\"{RULE}\"/>\
         <text x=\"0\" y=\"8\" font-size=\"9\" fill=\"{RULE}\">{max}/min</text></svg>"
    );
    svg
}

/// Commit → 2xx per window, oldest first: p50 as a solid line, p99 as a
/// dashed red one above it, each window a point, gaps where nothing was
/// delivered. Scaled so the slowest p99 fills the height.
pub(super) fn latency(windows: &[Option<Latency>], window_minutes: usize) -> String {
    let points: Vec<Option<(f64, f64, i64)>> = windows.iter().map(|w| w.and_then(sane)).collect();
    let n = points.len().max(1);
    let hour = span(n * window_minutes, "minute");
    if points.iter().all(Option::is_none) {
        return empty(
            &format!("No deliveries in the last {hour}, so no latency to show."),
            &format!("No deliveries in the last {hour}"),
        );
    }
    let max = points
        .iter()
        .flatten()
        .map(|&(_, p99, _)| p99)
        .fold(0.0, f64::max);
    let mut label = format!(
        "Time from commit to the partner's 2xx, per {} over the last {hour}, oldest first:",
        span(window_minutes, "minute")
    );
    for (i, p) in points.iter().enumerate() {
        let from = (n - i) * window_minutes;
        let to = from - window_minutes;
        let _ = match p {
            Some((p50, p99, delivered)) => write!(
                label,
                " {from} to {to} min ago p50 {}, p99 {} ({delivered} delivered);",
                duration(*p50),
                duration(*p99)
            ),
            None => write!(label, " {from} to {to} min ago none delivered;"),
        };
    }
    label.pop();
    label.push('.');

    let mut svg = open(&label);
    let pitch = WIDTH / n as f64;
    let room = HEIGHT - TOP;
    let y = |v: f64| {
        if max > 0.0 {
            HEIGHT - v / max * room
        } else {
            HEIGHT
        }
    };
    let x = |i: usize| (i as f64 + 0.5) * pitch;
    for (pick, colour, dash) in [
        (1usize, ALARM, " stroke-dasharray=\"3 2\""),
        (0usize, INK, ""),
    ] {
        let value = |p: &(f64, f64, i64)| if pick == 0 { p.0 } else { p.1 };
        // One polyline per run of windows with deliveries: a gap stays a gap.
        let mut run: Vec<String> = Vec::new();
        let flush = |run: &mut Vec<String>, svg: &mut String| {
            if run.len() > 1 {
                let _ = write!(
                    svg,
                    "<polyline points=\"{}\" fill=\"none\" stroke=\"{colour}\" stroke-width=\"1.5\"{dash}/>",
                    run.join(" ")
                );
            }
            run.clear();
        };
        for (i, p) in points.iter().enumerate() {
            match p {
                Some(p) => {
                    let (px, py) = (x(i), y(value(p)));
                    run.push(format!("{px:.1},{py:.1}"));
                    let _ = write!(
                        svg,
                        "<circle cx=\"{px:.1}\" cy=\"{py:.1}\" r=\"2\" fill=\"{colour}\"/>"
                    );
                }
                None => flush(&mut run, &mut svg),
            }
        }
        flush(&mut run, &mut svg);
    }
    let _ = write!(
        svg,
        "<line x1=\"0\" y1=\"{HEIGHT}\" x2=\"{WIDTH}\" y2=\"{HEIGHT}\" stroke=\"{RULE}\"/>\
         <text x=\"0\" y=\"8\" font-size=\"9\" fill=\"{RULE}\">{}</text></svg>",
        Escaped(&duration(max))
    );
    svg
}

/// A window's (p50, p99, delivered) fit to draw: finite, not negative, and
/// p99 never under p50 (percentiles of the same rows cannot cross; rounding
/// or a clock step must not draw them crossed).
fn sane(l: Latency) -> Option<(f64, f64, i64)> {
    if !(l.p50_seconds.is_finite() && l.p99_seconds.is_finite()) || l.delivered <= 0 {
        return None;
    }
    let p50 = l.p50_seconds.max(0.0);
    Some((p50, l.p99_seconds.max(p50), l.delivered))
}

/// "120 ms", "1.4 s", "3 min 5 s", "2 h 10 min": a latency, for people.
pub(super) fn duration(seconds: f64) -> String {
    if !seconds.is_finite() || seconds < 0.0 {
        return "unknown".to_owned();
    }
    if seconds < 1.0 {
        return format!("{} ms", (seconds * 1000.0).round() as u64);
    }
    if seconds < 10.0 {
        return format!("{seconds:.1} s");
    }
    let s = seconds.round() as u64;
    match s {
        0..60 => format!("{s} s"),
        60..3600 => format!("{} min {} s", s / 60, s % 60),
        _ => format!("{} h {} min", s / 3600, s % 3600 / 60),
    }
}

/// "60 minutes", "1 hour" rather than "60 minutes" when it is one.
fn span(units: usize, unit: &str) -> String {
    match (units, unit) {
        (60, "minute") => "hour".to_owned(),
        (1, u) => u.to_owned(),
        (n, u) => format!("{n} {u}s"),
    }
}

/// The opening tag and title of a chart described by `label`.
fn open(label: &str) -> String {
    format!(
        "<svg class=\"chart\" role=\"img\" aria-label=\"{0}\" width=\"{WIDTH}\" height=\"{HEIGHT}\" \
         viewBox=\"0 0 {WIDTH} {HEIGHT}\" xmlns=\"http://www.w3.org/2000/svg\"><title>{0}</title>",
        Escaped(label)
    )
}

/// A chart with nothing to draw: its label for assistive readers, and
/// `shown` (short enough to fit) as visible text.
fn empty(label: &str, shown: &str) -> String {
    let mut svg = open(label);
    let _ = write!(
        svg,
        "<line x1=\"0\" y1=\"{HEIGHT}\" x2=\"{WIDTH}\" y2=\"{HEIGHT}\" stroke=\"{RULE}\"/>\
         <text x=\"0\" y=\"{:.1}\" font-size=\"11\" fill=\"{RULE}\">{}</text></svg>",
        HEIGHT / 2.0 + 4.0,
        Escaped(shown)
    );
    svg
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The numbers of every `attr="…"` in `svg`.
    fn numbers(svg: &str, attr: &str) -> Vec<f64> {
        svg.split(&format!(" {attr}=\""))
            .skip(1)
            .map(|rest| {
                rest[..rest.find('"').expect("closing quote")]
                    .parse()
                    .expect("a number")
            })
            .collect()
    }

    #[test]
    fn an_empty_hour_says_so_in_words() {
        let svg = deliveries_per_minute(&[0; 60]);
        assert!(
            svg.contains("aria-label=\"No deliveries in the last hour.\""),
            "{svg}"
        );
        assert!(
            svg.contains(">No deliveries in the last hour</text>"),
            "visible: {svg}"
        );
        assert!(!svg.contains("<rect"), "no bars: {svg}");
        let svg = latency(&[None; 6], 10);
        assert!(
            svg.contains("aria-label=\"No deliveries in the last hour, so no latency to show.\""),
            "{svg}"
        );
        assert!(
            svg.contains(">No deliveries in the last hour</text>"),
            "visible, and short enough to fit: {svg}"
        );
        assert!(!svg.contains("<circle"), "{svg}");
    }

    #[test]
    fn bars_scale_to_the_busiest_minute_and_count_in_the_label() {
        let mut minutes = [0i64; 60];
        minutes[0] = 2;
        minutes[30] = 8;
        minutes[59] = 4;
        let svg = deliveries_per_minute(&minutes);
        let heights = numbers(&svg, "height");
        // The svg's own height first, then one bar per busy minute.
        assert_eq!(heights[0], HEIGHT);
        assert_eq!(&heights[1..], &[7.5, 30.0, 15.0], "{svg}");
        assert_eq!(
            numbers(&svg, "x"),
            vec![0.0, 120.0, 236.0, 0.0],
            "minute i at i × 4 px, then the label"
        );
        assert!(
            svg.contains(
                "aria-label=\"Deliveries per minute over the last hour: 14 delivered, \
                 at most 8 in one minute, 4 in the last minute.\""
            ),
            "{svg}"
        );
        assert!(svg.contains("<title>Deliveries per minute"), "{svg}");
        assert!(!svg.contains("style="), "no inline styles under the CSP");
    }

    #[test]
    fn a_single_delivery_is_visible_and_negative_counts_are_not_drawn() {
        let mut minutes = [0i64; 60];
        minutes[10] = 1000;
        minutes[11] = 1;
        minutes[12] = -5;
        let svg = deliveries_per_minute(&minutes);
        let heights = numbers(&svg, "height");
        assert_eq!(heights.len(), 3, "two bars: {svg}");
        assert_eq!(heights[2], 1.0, "a lone delivery still shows");
        assert!(svg.contains("1001 delivered"), "{svg}");
    }

    fn window(delivered: i64, p50: f64, p99: f64) -> Option<Latency> {
        Some(Latency {
            delivered,
            p50_seconds: p50,
            p99_seconds: p99,
        })
    }

    #[test]
    fn latency_draws_p99_at_or_above_p50_with_gaps_and_words() {
        let svg = latency(
            &[
                None,
                window(3, 0.2, 0.5),
                window(4, 0.1, 1.0),
                None,
                window(1, 0.3, 0.3),
                window(2, 0.25, 0.4),
            ],
            10,
        );
        // Two runs per line: windows 2–3 and 5–6.
        assert_eq!(svg.matches("<polyline").count(), 4, "{svg}");
        assert_eq!(svg.matches("<circle").count(), 8, "{svg}");
        let ys = numbers(&svg, "cy");
        let (p99, p50) = ys.split_at(4);
        for (hi, lo) in p99.iter().zip(p50) {
            assert!(hi <= lo, "p99 is drawn higher (smaller y): {svg}");
        }
        assert_eq!(p99[1], TOP, "the slowest p99 fills the height");
        assert!(
            svg.contains(
                "50 to 40 min ago p50 200 ms, p99 500 ms (3 delivered); 40 to 30 min ago \
                 p50 100 ms, p99 1.0 s (4 delivered); 30 to 20 min ago none delivered;"
            ),
            "{svg}"
        );
        assert!(svg.contains(">1.0 s</text>"), "the scale's top: {svg}");
    }

    #[test]
    fn latency_survives_crossed_negative_and_non_finite_numbers() {
        let svg = latency(
            &[
                window(2, 0.8, 0.2),
                window(1, f64::NAN, 1.0),
                window(1, 0.1, f64::INFINITY),
                window(1, -3.0, -1.0),
                None,
                None,
            ],
            10,
        );
        assert!(!svg.contains("NaN") && !svg.contains("inf"), "{svg}");
        assert!(
            svg.contains("p50 800 ms, p99 800 ms"),
            "p99 never under p50: {svg}"
        );
        assert!(svg.contains("p50 0 ms, p99 0 ms"), "clamped at zero: {svg}");
        for y in numbers(&svg, "cy") {
            assert!((TOP..=HEIGHT).contains(&y), "inside the chart: {y}");
        }
    }

    #[test]
    fn labels_are_escaped() {
        // The label is ours, but it goes through the same escaping as
        // everything else interpolated into the page.
        let svg = empty("a \"quoted\" <b>label</b>", "<i>shown</i>");
        assert!(svg.contains("aria-label=\"a &quot;quoted&quot; &lt;b&gt;label&lt;/b&gt;\""));
        assert!(svg.contains("&lt;i&gt;shown&lt;/i&gt;</text>"));
        assert!(!svg.contains("<b>") && !svg.contains("<i>"));
    }

    #[test]
    fn durations_read_like_people_say_them() {
        assert_eq!(duration(0.1234), "123 ms");
        assert_eq!(duration(1.44), "1.4 s");
        assert_eq!(duration(42.4), "42 s");
        assert_eq!(duration(185.0), "3 min 5 s");
        assert_eq!(duration(7800.0), "2 h 10 min");
        assert_eq!(duration(f64::NAN), "unknown");
    }
}
