//! The Holdfast desktop app's entry point; everything lives in the library
//! so the mock-runtime tests can drive the same commands.

// No console window behind the app on Windows release builds.
#![cfg_attr(not(debug_assertions), windows_subsystem = "windows")]

fn main() {
    // WebKitGTK's accelerated compositing costs ~80 MiB in the web process
    // (measured under Xvfb: 181 → 101 MiB PSS; bench item 9g) and is the
    // usual cause of blank windows on some Linux GPU drivers; an order desk
    // of forms and a 200-row list has no use for it. Set here, before any
    // thread exists, and only if the user has not chosen.
    #[cfg(target_os = "linux")]
    if std::env::var_os("WEBKIT_DISABLE_COMPOSITING_MODE").is_none() {
        std::env::set_var("WEBKIT_DISABLE_COMPOSITING_MODE", "1");
    }
    holdfast_desktop::run();
}
