//! The Holdfast desktop app's entry point; everything lives in the library
//! so the mock-runtime tests can drive the same commands.

// No console window behind the app on Windows release builds.
#![cfg_attr(not(debug_assertions), windows_subsystem = "windows")]

fn main() {
    holdfast_desktop::run();
}
