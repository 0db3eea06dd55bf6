//! The standard `process_*` metrics (Prometheus client guidelines), read
//! from `/proc/self` at each scrape.
//!
//! Read here rather than through a crate: it is five numbers from three
//! files, and the exporter we use has no process collector. Off Linux there
//! is no `/proc` and the families are simply absent.

use std::fmt::Write;

/// Clock ticks per second in `/proc/<pid>/stat` (USER_HZ). Linux reports
/// times in USER_HZ whatever the kernel's HZ, and USER_HZ is 100 on every
/// architecture Holdfast builds for.
const TICKS_PER_SECOND: f64 = 100.0;

#[derive(Debug, PartialEq)]
struct Sample {
    cpu_seconds: f64,
    start_time_seconds: f64,
    virtual_memory_bytes: f64,
    resident_memory_bytes: f64,
    open_fds: f64,
    max_fds: Option<f64>,
}

/// Appends the process families to a Prometheus text exposition.
pub(super) fn render_into(text: &mut String) {
    let Some(sample) = read() else { return };
    let mut family = |name: &str, kind: &str, help: &str, value: f64| {
        let _ = write!(
            text,
            "# HELP {name} {help}\n# TYPE {name} {kind}\n{name} {value}\n\n"
        );
    };
    family(
        "process_cpu_seconds_total",
        "counter",
        "Total user and system CPU time spent in seconds.",
        sample.cpu_seconds,
    );
    family(
        "process_start_time_seconds",
        "gauge",
        "Start time of the process since unix epoch in seconds.",
        sample.start_time_seconds,
    );
    family(
        "process_virtual_memory_bytes",
        "gauge",
        "Virtual memory size in bytes.",
        sample.virtual_memory_bytes,
    );
    family(
        "process_resident_memory_bytes",
        "gauge",
        "Resident memory size in bytes.",
        sample.resident_memory_bytes,
    );
    family(
        "process_open_fds",
        "gauge",
        "Number of open file descriptors.",
        sample.open_fds,
    );
    if let Some(max) = sample.max_fds {
        family(
            "process_max_fds",
            "gauge",
            "Maximum number of open file descriptors.",
            max,
        );
    }
}

fn read() -> Option<Sample> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    let boot_time = std::fs::read_to_string("/proc/stat").ok()?;
    let open_fds = std::fs::read_dir("/proc/self/fd").ok()?.count() as f64;
    let limits = std::fs::read_to_string("/proc/self/limits").unwrap_or_default();
    parse(&stat, &boot_time, open_fds, &limits)
}

/// The fields of `/proc/self/stat` (proc(5)), counted from 1: 14 utime,
/// 15 stime, 22 starttime (ticks after boot), 23 vsize (bytes), 24 rss
/// (pages). The command name (field 2) may hold spaces and parentheses, so
/// fields are counted from the last `)`.
fn parse(stat: &str, proc_stat: &str, open_fds: f64, limits: &str) -> Option<Sample> {
    let after_name = &stat[stat.rfind(')')? + 1..];
    // after_name starts at field 3.
    let fields: Vec<&str> = after_name.split_whitespace().collect();
    let field = |n: usize| -> Option<f64> { fields.get(n - 3)?.parse().ok() };
    let boot_time: f64 = proc_stat
        .lines()
        .find_map(|l| l.strip_prefix("btime "))?
        .trim()
        .parse()
        .ok()?;
    let max_fds = limits
        .lines()
        .find(|l| l.starts_with("Max open files"))
        .and_then(|l| l.split_whitespace().nth(3))
        .and_then(|soft| soft.parse().ok());
    Some(Sample {
        cpu_seconds: (field(14)? + field(15)?) / TICKS_PER_SECOND,
        start_time_seconds: boot_time + field(22)? / TICKS_PER_SECOND,
        virtual_memory_bytes: field(23)?,
        resident_memory_bytes: field(24)? * page_size(),
        open_fds,
        max_fds,
    })
}

/// Resident pages to bytes. `/proc/self/statm` and `stat` count pages;
/// `status` gives VmRSS in kB, which pins the page size without libc.
fn page_size() -> f64 {
    let from_status = || -> Option<f64> {
        let status = std::fs::read_to_string("/proc/self/status").ok()?;
        let statm = std::fs::read_to_string("/proc/self/statm").ok()?;
        let rss_kb: f64 = status
            .lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))?
            .split_whitespace()
            .next()?
            .parse()
            .ok()?;
        let rss_pages: f64 = statm.split_whitespace().nth(1)?.parse().ok()?;
        (rss_pages > 0.0).then(|| {
            // Round to a power of two: the two files are read at slightly
            // different moments.
            let raw = rss_kb * 1024.0 / rss_pages;
            2f64.powi(raw.log2().round() as i32)
        })
    };
    from_status().unwrap_or(4096.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_a_stat_line_whose_command_has_spaces_and_parentheses() {
        let stat = "4242 (holdfast (srv) x) S 1 4242 4242 0 -1 4194560 2000 0 0 0 250 150 0 0 20 0 12 0 \
                    5000 123456789 300 18446744073709551615 1 1 0 0 0 0 0 4096 0 0 0 0 17 1 0 0 0 0 0";
        let proc_stat = "cpu  1 2 3\nbtime 1764000000\nprocesses 99\n";
        let limits = "Limit                     Soft Limit           Hard Limit           Units\n\
                      Max open files            1024                 524288               files\n";
        let s = parse(stat, proc_stat, 9.0, limits).expect("parses");
        assert_eq!(s.cpu_seconds, 4.0);
        assert_eq!(s.start_time_seconds, 1_764_000_050.0);
        assert_eq!(s.virtual_memory_bytes, 123_456_789.0);
        assert_eq!(s.resident_memory_bytes, 300.0 * page_size());
        assert_eq!(s.open_fds, 9.0);
        assert_eq!(s.max_fds, Some(1024.0));
    }

    #[test]
    fn this_process_reports_itself() {
        let mut text = String::new();
        render_into(&mut text);
        for name in [
            "process_cpu_seconds_total",
            "process_resident_memory_bytes",
            "process_open_fds",
        ] {
            assert!(
                text.contains(&format!("# HELP {name} ")),
                "{name} missing from\n{text}"
            );
        }
        let rss: f64 = text
            .lines()
            .find_map(|l| l.strip_prefix("process_resident_memory_bytes "))
            .expect("rss line")
            .parse()
            .expect("a number");
        assert!(
            rss > 1_000_000.0,
            "a test process uses more than 1 MB: {rss}"
        );
    }
}
