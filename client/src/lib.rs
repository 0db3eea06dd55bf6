//! Holdfast's local-first client engine, with no UI toolkit in it: a SQLite
//! store of mirrored documents and pending acts, the sync loop that pushes
//! them exactly once and in order and pulls what changed, and conflict and
//! rejection handling. The `holdfast` CLI and the desktop shell drive it.
//!
//! Start at [`engine::Engine`]: acts (`create_order`, `allocate`, …) land in
//! the store at once; [`engine::Engine::sync_once`] or
//! [`engine::Engine::run`] carry them to the server.

pub mod act;
pub mod api;
pub mod conflict;
pub mod engine;
mod heap;
pub mod store;
pub mod sync;
pub mod token;
pub mod view;

pub use conflict::{Choice, Resolution};
pub use engine::{Engine, EngineEvent, Error, NewOrder, RejectionChoice, Reorder, SyncConfig};
pub use sync::SyncReport;
