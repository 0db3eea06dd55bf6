//! Wire types and pure functions shared by the Holdfast client and server.
//!
//! Nothing in this crate does I/O: it holds the documents and mutation bodies
//! of API.md, the mutations as one type with their routes, the idempotency
//! key, the partner event types, the problem codes, body parsing, canonical
//! JSON and the request fingerprint, Standard Webhooks signing and
//! verification, and the retry backoff.

pub mod admin;
pub mod backoff;
pub mod canonical;
pub mod event;
pub mod json;
pub mod key;
pub mod model;
pub mod mutation;
pub mod problem;
pub mod webhook;
