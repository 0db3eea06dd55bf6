//! Giving the heap a large pull freed back to the system.
//!
//! Storing a page of pulled documents grows SQLite's page cache to up to
//! 64 MiB (`Store::write_mirror`) and shrinks it back afterwards. What it
//! frees, glibc keeps wherever it lies between live allocations, for the
//! process to reuse, and a desk is a process that runs all day. The desktop
//! app that caught up at launch with what had changed while it was closed
//! (bench item 9h) carried ~16 MiB of it: `gdb -p … -ex 'call
//! malloc_trim(0)'` on the idle app took its anonymous memory from 51 to
//! 35 MiB. With [`release_freed`] after such a pull, 9h went from 55.0 to
//! 34.4 MiB above the bare webview (`holdfast-bench --only 9`, back to back
//! on one machine, 2026-12-06).

/// Returns the free pages of every malloc arena to the system (glibc's
/// `malloc_trim(0)`; a no-op where the allocator is not glibc's). Costs a
/// walk of the free lists and a system call per hole: 3.6 ms for 30 MiB in
/// 64 KiB holes (this module's test, release build), so call it after work
/// that freed a lot, not after every small change.
pub fn release_freed() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim has no preconditions: it takes each arena's lock
    // and only changes the allocator's own bookkeeping (and madvises pages
    // no allocation holds), so it is safe to call from any thread at any
    // time.
    #[allow(unsafe_code)]
    unsafe {
        libc::malloc_trim(0);
    }
}

#[cfg(all(test, target_os = "linux", target_env = "gnu"))]
mod tests {
    use super::release_freed;

    /// The process's resident anonymous memory (KiB).
    fn rss_anon_kib() -> u64 {
        std::fs::read_to_string("/proc/self/status")
            .expect("read /proc/self/status")
            .lines()
            .find_map(|l| l.strip_prefix("RssAnon:"))
            .and_then(|v| v.split_whitespace().next())
            .and_then(|v| v.parse().ok())
            .expect("RssAnon in /proc/self/status")
    }

    #[test]
    fn memory_freed_between_live_allocations_goes_back_to_the_system() {
        // What a page cache leaves behind: 32 MiB of page-sized blocks, a
        // small live allocation after every sixteenth, so freeing the
        // blocks leaves 64 KiB holes the allocator cannot shrink past.
        const BLOCKS: usize = 8 * 1024;
        let mut blocks = Vec::with_capacity(BLOCKS);
        let mut pins = Vec::with_capacity(BLOCKS / 16);
        for i in 0..BLOCKS {
            blocks.push(vec![i as u8; 4096]);
            if i % 16 == 15 {
                pins.push(Box::new(i));
            }
        }
        drop(blocks);
        let held = rss_anon_kib();
        release_freed();
        let after = rss_anon_kib();
        assert!(
            held.saturating_sub(after) >= 16 * 1024,
            "of the 32 MiB freed between live allocations, only {} KiB went back \
             ({held} KiB resident before, {after} KiB after)",
            held.saturating_sub(after)
        );
        assert_eq!(pins.len(), BLOCKS / 16, "the pins stay live until here");
    }
}
