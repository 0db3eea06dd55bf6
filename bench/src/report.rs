//! The table: rows of Holdfast next to its baseline, the ratio, latencies and
//! goals; the machine facts that belong with any number; and the Markdown
//! file they are written to (only between the generated-section markers, so
//! the hand-written notes around them survive a re-run).

use std::fmt::Write as _;
use std::path::Path;
use std::time::Duration;

use anyhow::Context;

use crate::load::Latencies;

/// One line of the table.
#[derive(Debug, Clone, Default)]
pub struct Row {
    pub item: String,
    pub what: String,
    pub holdfast: String,
    pub baseline: String,
    pub ratio: Option<f64>,
    /// Lowest and highest per-round ratio, when there were several rounds.
    pub ratio_range: Option<(f64, f64)>,
    pub holdfast_latency: Option<(Duration, Duration)>,
    pub baseline_latency: Option<(Duration, Duration)>,
    pub goal: Option<Goal>,
}

#[derive(Debug, Clone)]
pub struct Goal {
    pub text: String,
    pub met: bool,
}

impl Goal {
    pub fn new(text: impl Into<String>, met: bool) -> Option<Goal> {
        Some(Goal {
            text: text.into(),
            met,
        })
    }
}

pub fn latency(l: &Latencies) -> Option<(Duration, Duration)> {
    (l.len() > 0).then(|| (l.p50(), l.p99()))
}

/// Milliseconds with the precision that matters at that size.
pub fn ms(d: Duration) -> String {
    let ms = d.as_secs_f64() * 1000.0;
    if ms < 10.0 {
        format!("{ms:.2} ms")
    } else if ms < 100.0 {
        format!("{ms:.1} ms")
    } else {
        format!("{ms:.0} ms")
    }
}

pub fn rate(per_sec: f64) -> String {
    format!("{}/s", thousands(per_sec.round() as u64))
}

pub fn thousands(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

fn pair(p: Option<(Duration, Duration)>) -> String {
    p.map(|(a, b)| format!("{} / {}", ms(a), ms(b)))
        .unwrap_or_default()
}

fn ratio_text(row: &Row) -> String {
    match (row.ratio, row.ratio_range) {
        (Some(r), Some((lo, hi))) if (hi - lo).abs() >= 0.005 => {
            format!("**{r:.2}** ({lo:.2}–{hi:.2})")
        }
        (Some(r), _) => format!("**{r:.2}**"),
        (None, _) => String::new(),
    }
}

const HEADER: [&str; 9] = [
    "#",
    "measurement",
    "Holdfast",
    "baseline",
    "ratio",
    "Holdfast p50 / p99",
    "baseline p50 / p99",
    "goal",
    "met",
];

/// A Markdown table, padded so it also reads well in a terminal.
pub fn table(rows: &[Row]) -> String {
    let cells: Vec<[String; 9]> = rows
        .iter()
        .map(|r| {
            [
                r.item.clone(),
                r.what.clone(),
                r.holdfast.clone(),
                r.baseline.clone(),
                ratio_text(r),
                pair(r.holdfast_latency),
                pair(r.baseline_latency),
                r.goal.as_ref().map(|g| g.text.clone()).unwrap_or_default(),
                r.goal
                    .as_ref()
                    .map(|g| if g.met { "yes" } else { "**no**" }.to_owned())
                    .unwrap_or_default(),
            ]
        })
        .collect();
    let mut widths = HEADER.map(|h| h.chars().count());
    for row in &cells {
        for (w, c) in widths.iter_mut().zip(row) {
            *w = (*w).max(c.chars().count());
        }
    }
    let line = |cells: &[String]| {
        let mut s = String::from("|");
        for (c, w) in cells.iter().zip(widths) {
            let pad = w - c.chars().count();
            let _ = write!(s, " {c}{} |", " ".repeat(pad));
        }
        s.push('\n');
        s
    };
    let mut out = line(&HEADER.map(str::to_owned));
    out.push('|');
    for w in widths {
        let _ = write!(out, "{}|", "-".repeat(w + 2));
    }
    out.push('\n');
    for row in &cells {
        out.push_str(&line(row));
    }
    out
}

/// Where and when the numbers were taken.
#[derive(Debug, Clone, Default)]
pub struct Machine {
    pub date: String,
    pub nproc: usize,
    pub cpu: String,
    pub memory: String,
    pub kernel: String,
    pub postgres: String,
    pub postgres_settings: String,
    pub load_before: String,
    pub load_after: String,
}

impl Machine {
    pub fn read() -> Machine {
        let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
        let cpu = cpuinfo
            .lines()
            .find_map(|l| l.strip_prefix("model name"))
            .map(|l| l.trim_start_matches([' ', '\t', ':']).trim().to_owned())
            .unwrap_or_else(|| "unknown".to_owned());
        let memory = std::fs::read_to_string("/proc/meminfo")
            .unwrap_or_default()
            .lines()
            .find_map(|l| l.strip_prefix("MemTotal:"))
            .and_then(|kb| kb.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
            .map(|kb| format!("{:.1} GiB", kb as f64 / 1024.0 / 1024.0))
            .unwrap_or_else(|| "unknown".to_owned());
        Machine {
            date: chrono::Utc::now().format("%Y-%m-%d %H:%M UTC").to_string(),
            nproc: std::thread::available_parallelism().map_or(1, |n| n.get()),
            cpu,
            memory,
            kernel: std::fs::read_to_string("/proc/sys/kernel/osrelease")
                .map(|s| s.trim().to_owned())
                .unwrap_or_default(),
            load_before: loadavg(),
            ..Machine::default()
        }
    }
}

/// The 1/5/15-minute load averages: how busy the machine was with others.
pub fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_default()
}

/// Everything the bench generates for the document.
pub struct Report {
    pub title: String,
    pub machine: Machine,
    pub settings: String,
    pub rows: Vec<Row>,
    pub diagnostics: Vec<Row>,
    pub notes: Vec<String>,
}

impl Report {
    pub fn render(&self) -> String {
        let m = &self.machine;
        let mut out = String::new();
        let _ = writeln!(out, "### {} — {}\n", self.title, m.date);
        let _ = writeln!(
            out,
            "Machine: {} cores (nproc), CPU \"{}\", {} RAM, Linux {}; {}; {}. \
             Server and load generator on the same machine (the server in the bench \
             process on its own tokio runtime, over loopback HTTP; Postgres over its \
             unix socket). Load average (1/5/15 min) before: {}, after: {} — other \
             work shared these cores, which is why every figure is a ratio to a \
             baseline measured in the same run, interleaved with it.\n",
            m.nproc,
            m.cpu,
            m.memory,
            m.kernel,
            m.postgres,
            m.postgres_settings,
            m.load_before,
            m.load_after
        );
        let _ = writeln!(out, "{}\n", self.settings);
        out.push_str(&table(&self.rows));
        out.push_str(
            "\nratio: Holdfast ÷ baseline for rates; baseline ÷ Holdfast for latencies \
             (p50), so higher is better either way and 1.00 means as good as the baseline. \
             Items 1–4: the median of the per-round ratios, in brackets the lowest and highest \
             round; rates are over all rounds, latencies over all rounds' requests (item 4: per \
             REST call, per push of 500, per raw transaction of 100).\n",
        );
        if !self.diagnostics.is_empty() {
            out.push_str(
                "\nDiagnostics (not Holdfast as shipped; they locate the gaps above): the \
                 allocation's SQL replayed over sqlx without HTTP, as the engine ran it before it \
                 was folded (20 statements) and with its hot-row writes folded into one \
                 statement, against the raw one-commit baseline; and variants of the \
                 row-level-security binding (RLS-d).\n\n",
            );
            out.push_str(&table(&self.diagnostics));
        }
        for note in &self.notes {
            let _ = writeln!(out, "\n{note}");
        }
        out
    }
}

const BEGIN: &str = "<!-- bench:begin (generated by `make bench`; edit outside these markers) -->";
const END: &str = "<!-- bench:end -->";

/// Writes `generated` between the markers of `path`, keeping everything
/// else; a missing file (or one without markers) gets a fresh skeleton.
pub fn write_doc(path: &Path, generated: &str) -> anyhow::Result<()> {
    let old = std::fs::read_to_string(path).unwrap_or_default();
    let fresh = || {
        format!(
            "# Benchmarks\n\nHow close Holdfast comes to what Postgres itself can do, measured \
             side by side in one run. `make bench` writes the section below; \
             `make bench QUICK=1` prints a shorter run without touching this file.\n\n\
             {BEGIN}\n{generated}\n{END}\n"
        )
    };
    let text = match (old.find(BEGIN), old.find(END)) {
        (Some(b), Some(e)) if b < e => {
            format!("{}{BEGIN}\n{generated}\n{}", &old[..b], &old[e..])
        }
        _ => fresh(),
    };
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    std::fs::write(path, text).with_context(|| format!("writing {}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_read_well() {
        assert_eq!(thousands(1_234_567), "1,234,567");
        assert_eq!(thousands(12), "12");
        assert_eq!(ms(Duration::from_micros(1500)), "1.50 ms");
        assert_eq!(ms(Duration::from_millis(250)), "250 ms");
    }

    #[test]
    fn rewrites_only_the_generated_section() {
        let dir = std::env::temp_dir().join(format!("hf-bench-doc-{}", std::process::id()));
        let path = dir.join("B.md");
        write_doc(&path, "one").expect("first");
        let first = std::fs::read_to_string(&path).expect("read");
        std::fs::write(&path, format!("{first}\n## Notes\nkeep me\n")).expect("notes");
        write_doc(&path, "two").expect("second");
        let second = std::fs::read_to_string(&path).expect("read");
        assert!(second.contains("two") && !second.contains("\none\n"));
        assert!(second.contains("keep me"));
        let _ = std::fs::remove_dir_all(dir);
    }
}
