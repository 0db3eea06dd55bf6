//! The command line: clap's types for every subcommand and flag. Their doc
//! comments are what `holdfast --help` and `holdfast <sub> --help` print.

use std::path::PathBuf;

use chrono::NaiveDate;
use clap::{Args, Parser, Subcommand};

#[derive(Parser, Debug)]
#[command(
    name = "holdfast",
    version,
    about = "Holdfast order desk: works offline, syncs exactly once when it can",
    long_about = "Holdfast order desk on the command line.\n\n\
        Every act (new order, edit, allocation, …) is stored locally at once and sent to \
        the server later, exactly once and in order, even across crashes and days offline. \
        `holdfast pending` prints what has not reached the server yet.\n\n\
        The device token lives in the OS keychain. On a machine without one, opt in to a \
        plain token file with --token-file (or HOLDFAST_TOKEN_FILE)."
)]
pub(crate) struct Cli {
    /// The local store (a SQLite file). Default: $XDG_DATA_HOME/holdfast/desk.db
    /// (or ~/.local/share/holdfast/desk.db).
    #[arg(long, global = true, env = "HOLDFAST_STORE")]
    pub(crate) store: Option<PathBuf>,
    /// Opt-in fallback for machines without an OS keychain: keep the device
    /// token in this PLAIN file (mode 0600). Anyone who can read it can act as
    /// you until you log out.
    #[arg(long, global = true, env = "HOLDFAST_TOKEN_FILE")]
    pub(crate) token_file: Option<PathBuf>,
    /// Machine-readable output (one JSON document; `sync --watch`: one per line).
    #[arg(long, global = true)]
    pub(crate) json: bool,
    /// Only queue acts; do not try to send them now.
    #[arg(long, global = true)]
    pub(crate) no_sync: bool,
    /// Mutations per push (1–500).
    #[arg(
        long,
        global = true,
        env = "HOLDFAST_BATCH_SIZE",
        default_value_t = 100
    )]
    pub(crate) batch_size: usize,
    #[command(subcommand)]
    pub(crate) command: Command,
}

#[derive(Subcommand, Debug)]
pub(crate) enum Command {
    /// Sign in and keep this device's token in the keychain.
    Login(LoginArgs),
    /// Revoke this device's token and forget it (queued acts stay).
    Logout,
    /// Online or offline, pending acts, last sync, conflicts, rejections.
    Status,
    /// List orders (pending acts applied, each marked).
    Orders {
        /// Only orders in this status: draft, confirmed, cancelled.
        #[arg(long)]
        status: Option<String>,
    },
    /// Create, show or change one order.
    #[command(subcommand)]
    Order(OrderCommand),
    /// Search SKUs by style, colour, size (with ATS).
    Skus {
        /// Words that must all appear, e.g. kestrel indigo m.
        query: Vec<String>,
        #[arg(long, default_value_t = 50)]
        limit: i64,
    },
    /// List customers.
    Customers,
    /// Push pending acts and pull what changed.
    Sync {
        /// Keep running: sync on every server poke, local act and retry.
        #[arg(long)]
        watch: bool,
        /// Only pull (never touches pending acts).
        #[arg(long, conflicts_with = "push_only")]
        pull_only: bool,
        /// Only push.
        #[arg(long)]
        push_only: bool,
    },
    /// Print every act that has not reached the server (the paper fallback).
    Pending,
    /// Open conflicts: base, mine and theirs per field.
    Conflicts,
    /// Acts the server refused, with the facts and the choices.
    Rejections,
    /// Resolve a conflict or a rejection.
    #[command(subcommand)]
    Resolve(ResolveCommand),
    /// What this version cannot read, kept: records the server sent in a
    /// newer form, and your changes it cannot read or send (in quarantine;
    /// each holds its order's later changes until a newer holdfast sends it).
    Held {
        /// Also write everything held, raw (keys, requests, documents), to
        /// FILE as JSON, for an administrator.
        #[arg(long, value_name = "FILE")]
        export: Option<std::path::PathBuf>,
    },
}

#[derive(Args, Debug)]
pub(crate) struct LoginArgs {
    /// Server base URL, e.g. http://127.0.0.1:8080
    #[arg(long, env = "HOLDFAST_SERVER")]
    pub(crate) server: String,
    #[arg(long, env = "HOLDFAST_TENANT")]
    pub(crate) tenant: String,
    #[arg(long, env = "HOLDFAST_EMAIL")]
    pub(crate) email: String,
    /// Read the password from the first line of standard input (else
    /// HOLDFAST_PASSWORD).
    #[arg(long)]
    pub(crate) password_stdin: bool,
    /// How this device is named in the server's session list.
    #[arg(long)]
    pub(crate) device_name: Option<String>,
    /// Drop acts another user queued on this store and never sent.
    #[arg(long)]
    pub(crate) discard_pending: bool,
}

#[derive(Subcommand, Debug)]
pub(crate) enum OrderCommand {
    /// Create a draft order; prints its id.
    New {
        /// Customer id, or (part of) the name.
        #[arg(long)]
        customer: String,
        #[arg(long)]
        po: Option<String>,
        /// YYYY-MM-DD
        #[arg(long)]
        ship_start: Option<NaiveDate>,
        /// YYYY-MM-DD
        #[arg(long)]
        ship_end: Option<NaiveDate>,
        #[arg(long)]
        notes: Option<String>,
    },
    /// Show one order (lines, ATS, pending acts).
    Show {
        /// Order id or a unique prefix of it.
        order: String,
    },
    /// Change header fields.
    Edit(EditArgs),
    /// Add a line; prints its id.
    AddLine {
        order: String,
        /// SKU id (or give --style, --color and --size).
        #[arg(long, required_unless_present = "style")]
        sku: Option<String>,
        #[arg(long, requires_all = ["color", "size"])]
        style: Option<String>,
        #[arg(long)]
        color: Option<String>,
        #[arg(long)]
        size: Option<String>,
        #[arg(long)]
        qty: i64,
    },
    /// Change a line's ordered quantity.
    SetQty {
        order: String,
        /// Line id or a unique prefix of it.
        line: String,
        qty: i64,
    },
    /// Remove a line (releases its allocation).
    RemoveLine { order: String, line: String },
    /// Allocate stock to a line (the server checks ATS).
    Allocate {
        order: String,
        line: String,
        qty: i64,
    },
    /// Give back stock allocated to a line.
    Release {
        order: String,
        line: String,
        qty: i64,
    },
    /// Confirm a draft (credit check, pro-forma invoice).
    Confirm { order: String },
    /// Cancel (releases all allocations).
    Cancel { order: String },
}

#[derive(Args, Debug)]
pub(crate) struct EditArgs {
    pub(crate) order: String,
    /// Customer id, or (part of) the name.
    #[arg(long)]
    pub(crate) customer: Option<String>,
    #[arg(long, conflicts_with = "clear_po")]
    pub(crate) po: Option<String>,
    #[arg(long)]
    pub(crate) clear_po: bool,
    #[arg(long, conflicts_with = "clear_ship_start")]
    pub(crate) ship_start: Option<NaiveDate>,
    #[arg(long)]
    pub(crate) clear_ship_start: bool,
    #[arg(long, conflicts_with = "clear_ship_end")]
    pub(crate) ship_end: Option<NaiveDate>,
    #[arg(long)]
    pub(crate) clear_ship_end: bool,
    #[arg(long, conflicts_with = "clear_notes")]
    pub(crate) notes: Option<String>,
    #[arg(long)]
    pub(crate) clear_notes: bool,
}

#[derive(Subcommand, Debug)]
pub(crate) enum ResolveCommand {
    /// Resolve an order's conflict.
    Conflict {
        /// Order id or a unique prefix of it.
        order: String,
        /// Re-issue my changes on the current version (only when no field
        /// collides).
        #[arg(long, conflicts_with_all = ["discard_mine", "mine", "theirs"])]
        rebase: bool,
        /// Drop all my pending acts on this order.
        #[arg(long, conflicts_with_all = ["mine", "theirs"])]
        discard_mine: bool,
        /// Keep my value of this field (repeatable; e.g. notes, line:<id>).
        #[arg(long)]
        mine: Vec<String>,
        /// Keep their value of this field (repeatable).
        #[arg(long)]
        theirs: Vec<String>,
    },
    /// Act on a rejection: reduce, remove-line, retry or dismiss.
    Rejection {
        /// The rejection's number (see `holdfast rejections`).
        id: i64,
        /// reduce | remove-line | retry | dismiss
        choice: String,
    },
}
