//! Wire types and pure functions shared by the Holdfast client and server.
//!
//! Nothing in this crate does I/O: it holds the documents and mutation bodies
//! of API.md, the problem codes, canonical JSON and the request fingerprint,
//! Standard Webhooks signing and verification, and the retry backoff.

pub mod backoff;
pub mod canonical;
pub mod model;
pub mod problem;
pub mod webhook;
