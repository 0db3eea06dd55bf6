//! The desktop UI's TypeScript types (ui/src/lib/generated/) are rendered
//! from the Rust types that cross the Tauri IPC; this test fails when the
//! committed files are not what the Rust types render to today, and
//! `make ui-types` (this test with HOLDFAST_WRITE_UI_TYPES=1) rewrites them.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use holdfast_client::conflict::{Choice, ConflictView, FieldDiff, Resolution};
use holdfast_client::engine::{
    HeldItem, HeldKind, RejectionChoice, RejectionView, Reorder, Status as SyncStatus,
};
use holdfast_client::store::pending::Status as PendingStatus;
use holdfast_client::store::sync_state::Profile;
use holdfast_client::view::{
    Badge, DeskQuery, OrderHead, OrderPage, OrderSummary, OrderView, PendingMark, SkuView,
};
use holdfast_desktop::commands::{HeldExport, NewOrderArgs};
use holdfast_desktop::error::CommandError;
use holdfast_protocol::model::{
    Customer, HistoryDelivery, HistoryDeliveryState, HistoryEntry, Invoice, InvoiceStatus, Line,
    Order, OrderHeaderSet, OrderHistory, OrderStatus, Sku,
};
use holdfast_protocol::problem::ProblemCode;
use ts_rs::{Config, TS};

const REGENERATE: &str = "make ui-types";
const WRITE_ENV: &str = "HOLDFAST_WRITE_UI_TYPES";

fn generated_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../ui/src/lib/generated")
}

/// Every type the UI receives or sends, with what it refers to, as
/// `relative path → file text`.
fn render() -> BTreeMap<PathBuf, String> {
    let out = tempfile::tempdir().expect("temp dir");
    // The numbers that cross are counts, versions, cents and Unix
    // milliseconds, all far inside a JS number's 2^53; `bigint` would make
    // every one of them a different type on the UI side.
    let cfg = Config::new()
        .with_large_int("number")
        .with_out_dir(out.path());
    macro_rules! export {
        ($($t:ty),* $(,)?) => {
            $(<$t as TS>::export_all(&cfg).expect(stringify!($t));)*
        };
    }
    export!(
        // documents (protocol::model)
        Order,
        Line,
        OrderStatus,
        Invoice,
        InvoiceStatus,
        OrderHistory,
        HistoryEntry,
        HistoryDelivery,
        HistoryDeliveryState,
        Sku,
        Customer,
        OrderHeaderSet,
        ProblemCode,
        // engine views (client::view, client::conflict, client::store)
        OrderView,
        OrderSummary,
        OrderHead,
        OrderPage,
        DeskQuery,
        SkuView,
        Badge,
        PendingMark,
        PendingStatus,
        Profile,
        ConflictView,
        FieldDiff,
        Choice,
        Resolution,
        SyncStatus,
        RejectionView,
        RejectionChoice,
        Reorder,
        HeldItem,
        HeldKind,
        // command arguments and errors (src-tauri)
        NewOrderArgs,
        HeldExport,
        CommandError,
    );
    let mut files = read_tree(out.path());
    for text in files.values_mut() {
        *text = stamp(text);
    }
    files
}

/// Says under ts-rs's own header line how to regenerate the file.
fn stamp(text: &str) -> String {
    let note = format!(
        "// Rendered from the Rust types by `{REGENERATE}` (src-tauri/tests/ui_types.rs).\n"
    );
    match text.split_once('\n') {
        Some((first, rest)) if first.starts_with("//") => format!("{first}\n{note}{rest}"),
        _ => format!("{note}{text}"),
    }
}

fn read_tree(root: &Path) -> BTreeMap<PathBuf, String> {
    let mut files = BTreeMap::new();
    let mut dirs = vec![root.to_path_buf()];
    while let Some(dir) = dirs.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for entry in entries {
            let path = entry.expect("dir entry").path();
            if path.is_dir() {
                dirs.push(path);
            } else {
                let rel = path.strip_prefix(root).expect("under root").to_path_buf();
                let text = std::fs::read_to_string(&path).expect("read a generated file");
                files.insert(rel, text);
            }
        }
    }
    files
}

#[test]
fn committed_ui_types_match_the_rust_types() {
    let want = render();
    let dir = generated_dir();
    if std::env::var_os(WRITE_ENV).is_some() {
        if dir.exists() {
            std::fs::remove_dir_all(&dir).expect("clear the generated dir");
        }
        for (rel, text) in &want {
            let path = dir.join(rel);
            std::fs::create_dir_all(path.parent().expect("a parent")).expect("mkdir");
            std::fs::write(&path, text).expect("write a generated file");
        }
        return;
    }
    let have = read_tree(&dir);
    let mut wrong = Vec::new();
    for (rel, text) in &want {
        match have.get(rel) {
            None => wrong.push(format!("missing: {}", rel.display())),
            Some(t) if t != text => wrong.push(format!("stale: {}", rel.display())),
            Some(_) => {}
        }
    }
    for rel in have.keys().filter(|rel| !want.contains_key(*rel)) {
        wrong.push(format!("not rendered from Rust: {}", rel.display()));
    }
    assert!(
        wrong.is_empty(),
        "ui/src/lib/generated/ is out of step with the Rust types; run `{REGENERATE}` and commit the result:\n  {}",
        wrong.join("\n  ")
    );
}
