//! `holdfast`: the order desk on the command line, driving the same engine as
//! the desktop app. Every act lands in the local store at once; unless
//! `--no-sync` is given, the command then tries one sync pass and reports
//! whether the act reached the server (offline is not an error: it waits).

use std::io::{BufRead, Write};
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use anyhow::{anyhow, bail, Context};
use chrono::{DateTime, NaiveDate, Utc};
use clap::{Args, Parser, Subcommand};
use holdfast_client::conflict::{Choice, Resolution};
use holdfast_client::engine::{RejectionChoice, Status};
use holdfast_client::token::{FileTokens, KeyringTokens, TokenStore};
use holdfast_client::view::OrderView;
use holdfast_client::{Engine, EngineEvent, Error, NewOrder, SyncConfig, SyncReport};
use holdfast_protocol::model::{OrderHeaderSet, OrderStatus};
use serde::Serialize;
use serde_json::{json, Value};
use uuid::Uuid;

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
struct Cli {
    /// The local store (a SQLite file). Default: $XDG_DATA_HOME/holdfast/desk.db
    /// (or ~/.local/share/holdfast/desk.db).
    #[arg(long, global = true, env = "HOLDFAST_STORE")]
    store: Option<PathBuf>,
    /// Opt-in fallback for machines without an OS keychain: keep the device
    /// token in this PLAIN file (mode 0600). Anyone who can read it can act as
    /// you until you log out.
    #[arg(long, global = true, env = "HOLDFAST_TOKEN_FILE")]
    token_file: Option<PathBuf>,
    /// Machine-readable output (one JSON document; `sync --watch`: one per line).
    #[arg(long, global = true)]
    json: bool,
    /// Only queue acts; do not try to send them now.
    #[arg(long, global = true)]
    no_sync: bool,
    /// Mutations per push (1–500).
    #[arg(
        long,
        global = true,
        env = "HOLDFAST_BATCH_SIZE",
        default_value_t = 100
    )]
    batch_size: usize,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
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
}

#[derive(Args, Debug)]
struct LoginArgs {
    /// Server base URL, e.g. http://127.0.0.1:8080
    #[arg(long, env = "HOLDFAST_SERVER")]
    server: String,
    #[arg(long, env = "HOLDFAST_TENANT")]
    tenant: String,
    #[arg(long, env = "HOLDFAST_EMAIL")]
    email: String,
    /// Read the password from the first line of standard input (else
    /// HOLDFAST_PASSWORD).
    #[arg(long)]
    password_stdin: bool,
    /// How this device is named in the server's session list.
    #[arg(long)]
    device_name: Option<String>,
    /// Drop acts another user queued on this store and never sent.
    #[arg(long)]
    discard_pending: bool,
}

#[derive(Subcommand, Debug)]
enum OrderCommand {
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
struct EditArgs {
    order: String,
    /// Customer id, or (part of) the name.
    #[arg(long)]
    customer: Option<String>,
    #[arg(long, conflicts_with = "clear_po")]
    po: Option<String>,
    #[arg(long)]
    clear_po: bool,
    #[arg(long, conflicts_with = "clear_ship_start")]
    ship_start: Option<NaiveDate>,
    #[arg(long)]
    clear_ship_start: bool,
    #[arg(long, conflicts_with = "clear_ship_end")]
    ship_end: Option<NaiveDate>,
    #[arg(long)]
    clear_ship_end: bool,
    #[arg(long, conflicts_with = "clear_notes")]
    notes: Option<String>,
    #[arg(long)]
    clear_notes: bool,
}

#[derive(Subcommand, Debug)]
enum ResolveCommand {
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

fn default_store() -> PathBuf {
    let base = std::env::var_os("XDG_DATA_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("APPDATA").map(PathBuf::from))
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".local/share")))
        .unwrap_or_else(|| PathBuf::from("."));
    base.join("holdfast").join("desk.db")
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("HOLDFAST_LOG")
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .init();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("holdfast: cannot start: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(run(cli)) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("holdfast: {e:#}");
            ExitCode::FAILURE
        }
    }
}

/// Exit code of a sync that could not reach the server (nothing is lost).
const OFFLINE: u8 = 2;

async fn run(cli: Cli) -> anyhow::Result<ExitCode> {
    let store = cli.store.clone().unwrap_or_else(default_store);
    let tokens: Arc<dyn TokenStore> = match &cli.token_file {
        Some(path) => Arc::new(FileTokens::new(path)),
        None => Arc::new(KeyringTokens),
    };
    let config = SyncConfig {
        batch_size: cli.batch_size.clamp(1, 500),
        ..SyncConfig::default()
    };
    let engine = Engine::open(&store, tokens.clone(), config)
        .with_context(|| format!("opening the store {}", store.display()))?;
    let out = Out { json: cli.json };
    match cli.command {
        Command::Login(args) => {
            login(&engine, &out, &args, &*tokens, cli.token_file.is_some()).await
        }
        Command::Logout => {
            let revoked = engine.logout().await?;
            out.print(
                &json!({"logged_out": true, "revoked_on_server": revoked}),
                || {
                    if revoked {
                        "Logged out; the token is revoked.".to_owned()
                    } else {
                        "Logged out here; the server could not be reached, so the token \
                         stays valid there until it expires or is revoked."
                            .to_owned()
                    }
                },
            );
            Ok(ExitCode::SUCCESS)
        }
        Command::Status => {
            let s = engine.status()?;
            out.print(&s, || status_text(&s));
            Ok(ExitCode::SUCCESS)
        }
        Command::Orders { status } => {
            let want = status
                .as_deref()
                .map(|s| OrderStatus::parse(s).ok_or_else(|| anyhow!("unknown status {s:?}")))
                .transpose()?;
            let views: Vec<OrderView> = engine
                .orders()?
                .into_iter()
                .filter(|v| want.is_none_or(|w| v.order.status == w))
                .collect();
            out.print(&views, || orders_text(&engine, &views));
            Ok(ExitCode::SUCCESS)
        }
        Command::Order(cmd) => order(&engine, &out, cmd, !cli.no_sync).await,
        Command::Skus { query, limit } => {
            let skus = engine.skus(&query.join(" "), limit)?;
            out.print(&skus, || {
                let mut s = format!(
                    "{:<8}  {:<22} {:<14} {:<4} {:>9} {:>5} {:>5}\n",
                    "id", "style", "colour", "size", "price", "ATS", "mine"
                );
                for v in &skus {
                    s.push_str(&format!(
                        "{:<8}  {:<22} {:<14} {:<4} {:>9} {:>5} {:>5}\n",
                        short(&v.sku.id),
                        v.sku.style,
                        v.sku.color,
                        v.sku.size,
                        money(v.sku.wholesale_price),
                        v.sku.ats,
                        v.ats_local
                    ));
                }
                s.push_str("(ATS: the server's; mine: after my pending acts)");
                s
            });
            Ok(ExitCode::SUCCESS)
        }
        Command::Customers => {
            let cs = engine.customers()?;
            out.print(&cs, || {
                cs.iter()
                    .map(|c| {
                        format!(
                            "{}  {}  credit limit {}",
                            short(&c.id),
                            c.name,
                            c.credit_limit.map(money).unwrap_or_else(|| "none".into())
                        )
                    })
                    .collect::<Vec<_>>()
                    .join("\n")
            });
            Ok(ExitCode::SUCCESS)
        }
        Command::Sync {
            watch,
            pull_only,
            push_only,
        } => sync(&engine, &out, watch, pull_only, push_only).await,
        Command::Pending => {
            let rows = engine.pending_rows()?;
            let value: Vec<Value> = rows
                .iter()
                .map(|r| {
                    json!({
                        "seq": r.seq, "order_id": r.order_id, "idempotency_key": r.key,
                        "act": r.act.describe(), "status": r.status, "base_version": r.base_version,
                        "method": r.request.method, "path": r.request.path, "body": r.request.body,
                        "created_at": time(r.created_at), "attempts": r.attempts,
                        "last_error": r.last_error,
                    })
                })
                .collect();
            out.print(&Value::Array(value), || pending_text(&rows));
            Ok(ExitCode::SUCCESS)
        }
        Command::Conflicts => {
            let cs = engine.conflicts()?;
            out.print(&cs, || {
                if cs.is_empty() {
                    return "No conflicts.".to_owned();
                }
                let mut s = String::new();
                for c in &cs {
                    let ago = (Utc::now() - c.changed_at).num_seconds().max(0);
                    s.push_str(&format!(
                        "Order {}: {} changed it {ago} s ago (you started from version {}, it is now {}); {} of your acts wait.\n",
                        c.order_id, c.changed_by, c.your_base_version, c.current_version, c.held
                    ));
                    s.push_str(&format!(
                        "  {:<44} {:<20} {:<20} {:<20}\n",
                        "field", "base", "yours", "theirs"
                    ));
                    for f in &c.fields {
                        let mark = if f.collides {
                            "  ← choose"
                        } else if f.mine_changed {
                            "  (yours)"
                        } else {
                            "  (theirs)"
                        };
                        s.push_str(&format!(
                            "  {:<44} {:<20} {:<20} {:<20}{mark}\n",
                            f.field,
                            brief(&f.base),
                            brief(&f.mine),
                            brief(&f.theirs)
                        ));
                    }
                    if c.can_rebase {
                        s.push_str(&format!(
                            "  No field collides: `holdfast resolve conflict {} --rebase` keeps both.\n",
                            c.order_id
                        ));
                    } else {
                        s.push_str(&format!(
                            "  Choose per field: `holdfast resolve conflict {} --mine FIELD --theirs FIELD`, or --discard-mine.\n",
                            c.order_id
                        ));
                    }
                }
                s
            });
            Ok(ExitCode::SUCCESS)
        }
        Command::Rejections => {
            let rs = engine.rejections()?;
            out.print(&rs, || {
                if rs.is_empty() {
                    return "No rejections.".to_owned();
                }
                rs.iter()
                    .map(|r| {
                        let facts: Vec<String> =
                            r.facts.iter().map(|(k, v)| format!("{k}={}", brief(v))).collect();
                        let choices: Vec<String> = r
                            .choices
                            .iter()
                            .map(|c| match c {
                                RejectionChoice::ReduceToAts { qty } => format!("reduce (to {qty})"),
                                other => other.name().to_owned(),
                            })
                            .collect();
                        format!(
                            "#{} order {}: {} — refused: {} ({})\n  facts: {}\n  choices: {}   (holdfast resolve rejection {} CHOICE)",
                            r.id,
                            short(&r.order_id),
                            r.act,
                            r.detail.as_deref().unwrap_or(""),
                            r.code,
                            facts.join(", "),
                            choices.join(" | "),
                            r.id
                        )
                    })
                    .collect::<Vec<_>>()
                    .join("\n")
            });
            Ok(ExitCode::SUCCESS)
        }
        Command::Resolve(cmd) => resolve(&engine, &out, cmd, !cli.no_sync).await,
    }
}

struct Out {
    json: bool,
}

impl Out {
    /// Prints `value` as pretty JSON (`--json`, streamed: a long list is
    /// never built twice in memory) or as `text`.
    fn print<T: Serialize + ?Sized>(&self, value: &T, text: impl FnOnce() -> String) {
        let mut stdout = std::io::BufWriter::new(std::io::stdout().lock());
        // A closed pipe (`| head`) is not our failure.
        let _ = if self.json {
            serde_json::to_writer_pretty(&mut stdout, value)
                .map_err(std::io::Error::from)
                .and_then(|()| writeln!(stdout))
        } else {
            writeln!(stdout, "{}", text())
        };
        let _ = stdout.flush();
    }
}

fn short(id: &Uuid) -> String {
    id.to_string()[..8].to_owned()
}

fn money(cents: i64) -> String {
    format!("{}.{:02}", cents / 100, (cents % 100).abs())
}

fn time(ms: i64) -> Option<DateTime<Utc>> {
    DateTime::<Utc>::from_timestamp_millis(ms)
}

fn brief(v: &Value) -> String {
    let s = match v {
        Value::Null => "—".to_owned(),
        Value::String(s) => s.clone(),
        other => other.to_string(),
    };
    if s.chars().count() > 40 {
        format!("{}…", s.chars().take(39).collect::<String>())
    } else {
        s
    }
}

async fn login(
    engine: &Engine,
    out: &Out,
    args: &LoginArgs,
    tokens: &dyn TokenStore,
    file_fallback: bool,
) -> anyhow::Result<ExitCode> {
    let password = if args.password_stdin {
        let mut line = String::new();
        std::io::stdin()
            .lock()
            .read_line(&mut line)
            .context("reading the password from standard input")?;
        line.trim_end_matches(['\r', '\n']).to_owned()
    } else {
        std::env::var("HOLDFAST_PASSWORD").map_err(|_| {
            anyhow!("give the password on standard input with --password-stdin, or in HOLDFAST_PASSWORD")
        })?
    };
    if file_fallback {
        eprintln!("holdfast: the device token goes to {}", tokens.describe());
    }
    let device = args
        .device_name
        .clone()
        .unwrap_or_else(|| "holdfast CLI".to_owned());
    let profile = engine
        .login(
            &args.server,
            &args.tenant,
            &args.email,
            &password,
            &device,
            args.discard_pending,
        )
        .await?;
    let synced = engine.sync_once().await;
    out.print(
        &json!({"profile": profile, "token_store": tokens.describe(), "sync": sync_json(&synced)}),
        || {
            format!(
                "Logged in as {} ({}) at {} — token kept in {}.\n{}",
                profile.user_name,
                profile.user_email,
                profile.tenant_name,
                tokens.describe(),
                sync_text(&synced)
            )
        },
    );
    Ok(ExitCode::SUCCESS)
}

fn sync_json(r: &Result<SyncReport, Error>) -> Value {
    match r {
        Ok(report) => json!({"ok": true, "report": report}),
        Err(e) => json!({"ok": false, "offline": e.is_offline(), "error": e.to_string()}),
    }
}

fn sync_text(r: &Result<SyncReport, Error>) -> String {
    match r {
        Ok(r) => {
            let mut parts = vec![format!("{} sent", r.applied)];
            if r.conflicts > 0 {
                parts.push(format!(
                    "{} conflict(s) — see `holdfast conflicts`",
                    r.conflicts
                ));
            }
            if r.rejections > 0 {
                parts.push(format!(
                    "{} rejected — see `holdfast rejections`",
                    r.rejections
                ));
            }
            if r.retrying > 0 {
                parts.push(format!("{} to retry", r.retrying));
            }
            parts.push(format!("{} received", r.pulled));
            format!("Synced: {}.", parts.join(", "))
        }
        Err(e) if e.is_offline() => format!("Offline: kept locally, will be sent later ({e})."),
        Err(Error::Busy) => "Queued; another holdfast process is syncing and will send it.".into(),
        Err(e) => format!("Not synced: {e}"),
    }
}

async fn sync_after(engine: &Engine, enabled: bool) -> Option<Result<SyncReport, Error>> {
    if !enabled || engine.profile().ok().flatten().is_none() {
        return None;
    }
    Some(engine.sync_once().await)
}

fn resolve_order(engine: &Engine, given: &str) -> anyhow::Result<Uuid> {
    if let Ok(id) = given.parse() {
        return Ok(id);
    }
    if given.len() < 4 {
        bail!("give at least 4 characters of the order id");
    }
    let matches: Vec<Uuid> = engine
        .orders()?
        .into_iter()
        .map(|v| v.order.id)
        .filter(|id| id.to_string().starts_with(&given.to_ascii_lowercase()))
        .collect();
    match matches.as_slice() {
        [one] => Ok(*one),
        [] => bail!("no order starting with {given}"),
        _ => bail!(
            "{given} matches {} orders; give more of the id",
            matches.len()
        ),
    }
}

fn resolve_line(engine: &Engine, order: Uuid, given: &str) -> anyhow::Result<Uuid> {
    if let Ok(id) = given.parse() {
        return Ok(id);
    }
    let view = engine
        .order(order)?
        .ok_or_else(|| anyhow!("no order {order}"))?;
    let matches: Vec<Uuid> = view
        .order
        .lines
        .iter()
        .map(|l| l.id)
        .filter(|id| id.to_string().starts_with(&given.to_ascii_lowercase()))
        .collect();
    match matches.as_slice() {
        [one] => Ok(*one),
        [] => bail!("no line starting with {given} on order {}", short(&order)),
        _ => bail!("{given} matches several lines; give more of the id"),
    }
}

fn resolve_customer(engine: &Engine, given: &str) -> anyhow::Result<Uuid> {
    if let Ok(id) = given.parse() {
        return Ok(id);
    }
    engine
        .find_customer(given)?
        .map(|c| c.id)
        .ok_or_else(|| anyhow!("no single customer matches {given:?} (see `holdfast customers`)"))
}

async fn order(
    engine: &Engine,
    out: &Out,
    cmd: OrderCommand,
    sync: bool,
) -> anyhow::Result<ExitCode> {
    let (mut result, order_id): (Value, Uuid) = match cmd {
        OrderCommand::Show { order } => {
            let id = resolve_order(engine, &order)?;
            let view = engine
                .order(id)?
                .ok_or_else(|| anyhow!("no order {id} on this desk"))?;
            out.print(&view, || order_text(engine, &view));
            return Ok(ExitCode::SUCCESS);
        }
        OrderCommand::New {
            customer,
            po,
            ship_start,
            ship_end,
            notes,
        } => {
            let customer_id = resolve_customer(engine, &customer)?;
            let id = engine.create_order(NewOrder {
                customer_id,
                customer_po: po,
                ship_window_start: ship_start,
                ship_window_end: ship_end,
                notes,
            })?;
            (json!({"order_id": id}), id)
        }
        OrderCommand::Edit(a) => {
            let id = resolve_order(engine, &a.order)?;
            let set = OrderHeaderSet {
                customer_id: a
                    .customer
                    .as_deref()
                    .map(|c| resolve_customer(engine, c))
                    .transpose()?,
                customer_po: field(a.po, a.clear_po),
                ship_window_start: field(a.ship_start, a.clear_ship_start),
                ship_window_end: field(a.ship_end, a.clear_ship_end),
                notes: field(a.notes, a.clear_notes),
            };
            let key = engine.edit_order(id, set)?;
            (json!({"order_id": id, "idempotency_key": key}), id)
        }
        OrderCommand::AddLine {
            order,
            sku,
            style,
            color,
            size,
            qty,
        } => {
            let id = resolve_order(engine, &order)?;
            let sku_id = match (sku, style, color, size) {
                (Some(s), _, _, _) => s.parse().map_err(|_| anyhow!("--sku wants a SKU id"))?,
                (None, Some(st), Some(c), Some(sz)) => {
                    engine
                        .find_sku(&st, &c, &sz)?
                        .ok_or_else(|| anyhow!("no SKU {st} / {c} / {sz} (see `holdfast skus`)"))?
                        .id
                }
                _ => bail!("give --sku, or --style, --color and --size"),
            };
            let line = engine.add_line(id, sku_id, qty)?;
            (json!({"order_id": id, "line_id": line}), id)
        }
        OrderCommand::SetQty { order, line, qty } => {
            let id = resolve_order(engine, &order)?;
            let line = resolve_line(engine, id, &line)?;
            let key = engine.change_line(id, line, qty)?;
            (
                json!({"order_id": id, "line_id": line, "idempotency_key": key}),
                id,
            )
        }
        OrderCommand::RemoveLine { order, line } => {
            let id = resolve_order(engine, &order)?;
            let line = resolve_line(engine, id, &line)?;
            let key = engine.remove_line(id, line)?;
            (
                json!({"order_id": id, "line_id": line, "idempotency_key": key}),
                id,
            )
        }
        OrderCommand::Allocate { order, line, qty } => {
            let id = resolve_order(engine, &order)?;
            let line = resolve_line(engine, id, &line)?;
            let key = engine.allocate(id, line, qty)?;
            (
                json!({"order_id": id, "line_id": line, "idempotency_key": key}),
                id,
            )
        }
        OrderCommand::Release { order, line, qty } => {
            let id = resolve_order(engine, &order)?;
            let line = resolve_line(engine, id, &line)?;
            let key = engine.release(id, line, qty)?;
            (
                json!({"order_id": id, "line_id": line, "idempotency_key": key}),
                id,
            )
        }
        OrderCommand::Confirm { order } => {
            let id = resolve_order(engine, &order)?;
            let key = engine.confirm(id)?;
            (json!({"order_id": id, "idempotency_key": key}), id)
        }
        OrderCommand::Cancel { order } => {
            let id = resolve_order(engine, &order)?;
            let key = engine.cancel(id)?;
            (json!({"order_id": id, "idempotency_key": key}), id)
        }
    };
    let synced = sync_after(engine, sync).await;
    let view = engine.order(order_id)?;
    result["queued"] = json!(true);
    result["sync"] = synced.as_ref().map(sync_json).unwrap_or(Value::Null);
    result["order"] = serde_json::to_value(&view)?;
    out.print(&result, || {
        let mut s = String::new();
        if let (Some(line), None) = (
            result.get("line_id").and_then(Value::as_str),
            result.get("idempotency_key"),
        ) {
            s.push_str(&format!("New line {line}\n"));
        }
        if let Some(v) = &view {
            s.push_str(&order_text(engine, v));
        }
        s.push('\n');
        s.push_str(&match &synced {
            Some(r) => sync_text(r),
            None => "Queued locally (not sent: --no-sync or not logged in).".to_owned(),
        });
        s
    });
    Ok(ExitCode::SUCCESS)
}

/// `--x VALUE` sets, `--clear-x` clears, neither leaves the field alone.
fn field<T>(value: Option<T>, clear: bool) -> Option<Option<T>> {
    if clear {
        Some(None)
    } else {
        value.map(Some)
    }
}

async fn resolve(
    engine: &Engine,
    out: &Out,
    cmd: ResolveCommand,
    sync: bool,
) -> anyhow::Result<ExitCode> {
    match cmd {
        ResolveCommand::Conflict {
            order,
            rebase,
            discard_mine,
            mine,
            theirs,
        } => {
            let id = resolve_order(engine, &order)?;
            let resolution = if rebase {
                Resolution::Rebase
            } else if discard_mine {
                Resolution::DiscardMine
            } else if !mine.is_empty() || !theirs.is_empty() {
                let mut choices = std::collections::BTreeMap::new();
                for f in mine {
                    choices.insert(f, Choice::Mine);
                }
                for f in theirs {
                    choices.insert(f, Choice::Theirs);
                }
                Resolution::Choose(choices)
            } else {
                bail!("say how: --rebase, --discard-mine, or --mine/--theirs FIELD");
            };
            engine.resolve_conflict(id, &resolution)?;
        }
        ResolveCommand::Rejection { id, choice } => {
            let view = engine
                .rejections()?
                .into_iter()
                .find(|r| r.id == id)
                .ok_or_else(|| anyhow!("no open rejection #{id}"))?;
            let choice = match choice.as_str() {
                "reduce" => view
                    .choices
                    .iter()
                    .find(|c| matches!(c, RejectionChoice::ReduceToAts { .. }))
                    .cloned()
                    .ok_or_else(|| anyhow!("nothing to reduce to for rejection #{id}"))?,
                "remove-line" => RejectionChoice::RemoveLine,
                "retry" => RejectionChoice::TryAgain,
                "dismiss" => RejectionChoice::Dismiss,
                other => bail!("unknown choice {other:?}: reduce, remove-line, retry or dismiss"),
            };
            engine.resolve_rejection(id, &choice)?;
        }
    }
    let synced = sync_after(engine, sync).await;
    out.print(
        &json!({"resolved": true, "sync": synced.as_ref().map(sync_json)}),
        || {
            format!(
                "Resolved. {}",
                synced
                    .as_ref()
                    .map(sync_text)
                    .unwrap_or_else(|| "Queued locally.".into())
            )
        },
    );
    Ok(ExitCode::SUCCESS)
}

async fn sync(
    engine: &Engine,
    out: &Out,
    watch: bool,
    pull_only: bool,
    push_only: bool,
) -> anyhow::Result<ExitCode> {
    if watch {
        let mut events = engine.subscribe();
        let json = out.json;
        let printer = tokio::spawn(async move {
            while let Ok(event) = events.recv().await {
                let line = if json {
                    serde_json::to_string(&event).unwrap_or_default()
                } else {
                    match &event {
                        EngineEvent::Changed | EngineEvent::Pushed { .. } => continue,
                        EngineEvent::SyncFinished(r) => sync_text(&Ok(r.clone())),
                        EngineEvent::SyncFailed { error, .. } => format!("Sync failed: {error}"),
                        EngineEvent::StreamConnected => "Online: listening for changes.".into(),
                        EngineEvent::StreamLost { error } => format!("Stream lost: {error}"),
                    }
                };
                println!("{line}");
            }
        });
        let shutdown = async {
            let _ = tokio::signal::ctrl_c().await;
        };
        let result = engine.run(shutdown).await;
        printer.abort();
        result?;
        return Ok(ExitCode::SUCCESS);
    }
    let result = if pull_only {
        engine.pull().await
    } else if push_only {
        engine.push().await
    } else {
        engine.sync_once().await
    };
    out.print(&sync_json(&result), || sync_text(&result));
    Ok(match &result {
        Ok(_) => ExitCode::SUCCESS,
        Err(e) if e.is_offline() => ExitCode::from(OFFLINE),
        Err(_) => ExitCode::FAILURE,
    })
}

fn status_text(s: &Status) -> String {
    let mut out = String::new();
    match &s.signed_in {
        Some(p) => out.push_str(&format!(
            "Signed in: {} <{}> at {} ({})\n",
            p.user_name, p.user_email, p.tenant_name, p.server_url
        )),
        None => out.push_str("Signed in: no (holdfast login)\n"),
    }
    out.push_str(&format!(
        "Connection: {}\n",
        match s.online {
            Some(true) => "online",
            Some(false) => "OFFLINE",
            None => "unknown (not synced yet)",
        }
    ));
    out.push_str(&format!("Pending: {}", s.pending));
    if let Some(age) = s.oldest_pending_age_secs {
        out.push_str(&format!(" (oldest {age} s old)"));
    }
    out.push('\n');
    out.push_str(&format!(
        "Last synced: {}\n",
        s.last_synced_at
            .map(|t| t.to_rfc3339())
            .unwrap_or_else(|| "never".into())
    ));
    out.push_str(&format!(
        "Conflicts: {}   Rejections: {}\n",
        s.conflicts, s.rejections
    ));
    if let Some(e) = &s.last_error {
        out.push_str(&format!("Last error: {e}\n"));
    }
    if let Some(t) = s.next_attempt_at {
        out.push_str(&format!("Next automatic attempt: {}\n", t.to_rfc3339()));
    }
    out.push_str(&format!("Token: {}\nStore: {}", s.token_store, s.store));
    out
}

fn customer_name(engine: &Engine, id: Uuid) -> String {
    engine
        .customers()
        .ok()
        .and_then(|cs| cs.into_iter().find(|c| c.id == id))
        .map(|c| c.name)
        .unwrap_or_else(|| short(&id))
}

fn orders_text(engine: &Engine, views: &[OrderView]) -> String {
    if views.is_empty() {
        return "No orders.".to_owned();
    }
    let mut s = format!(
        "{:<36}  {:<9} {:<3} {:<24} {:<12} {:>5}  {}\n",
        "order", "status", "v", "customer", "PO", "lines", "sync"
    );
    for v in views {
        let o = &v.order;
        s.push_str(&format!(
            "{:<36}  {:<9} {:<3} {:<24} {:<12} {:>5}  {}\n",
            o.id,
            o.status.as_str(),
            o.version,
            customer_name(engine, o.customer_id)
                .chars()
                .take(24)
                .collect::<String>(),
            o.customer_po.as_deref().unwrap_or("—"),
            o.lines.len(),
            match v.pending.len() {
                0 => "synced".to_owned(),
                n => format!(
                    "{} ({n} pending)",
                    serde_json::to_value(v.badge)
                        .ok()
                        .and_then(|b| b.as_str().map(str::to_owned))
                        .unwrap_or_default()
                ),
            }
        ));
    }
    s.trim_end().to_owned()
}

fn order_text(engine: &Engine, v: &OrderView) -> String {
    let o = &v.order;
    let mut s = format!(
        "Order {}  [{}]  version {}{}\n",
        o.id,
        o.status.as_str(),
        o.version,
        match v.server_version {
            Some(sv) if sv != o.version => format!(" (server: {sv})"),
            None => " (not on the server yet)".to_owned(),
            _ => String::new(),
        }
    );
    s.push_str(&format!(
        "  customer {}  PO {}  ship {} – {}\n",
        customer_name(engine, o.customer_id),
        o.customer_po.as_deref().unwrap_or("—"),
        o.ship_window_start
            .map(|d| d.to_string())
            .unwrap_or_else(|| "?".into()),
        o.ship_window_end
            .map(|d| d.to_string())
            .unwrap_or_else(|| "?".into())
    ));
    if let Some(n) = &o.notes {
        s.push_str(&format!("  notes: {n}\n"));
    }
    for l in &o.lines {
        let sku = engine.sku(l.sku_id).ok().flatten();
        let pending = v.pending_fields.contains(&format!("line:{}", l.id));
        s.push_str(&format!(
            "  line {}  {:<40} ordered {:>4}  allocated {:>4}  ATS {:>5}{}\n",
            short(&l.id),
            sku.as_ref()
                .map(|k| format!("{} / {} / {}", k.sku.style, k.sku.color, k.sku.size))
                .unwrap_or_else(|| short(&l.sku_id)),
            l.qty_ordered,
            l.qty_allocated,
            sku.map(|k| k.ats_local.to_string())
                .unwrap_or_else(|| "?".into()),
            if pending { "  (pending)" } else { "" }
        ));
    }
    for p in &v.pending {
        s.push_str(&format!(
            "  pending #{}: {} [{}]{}\n",
            p.seq,
            p.description,
            serde_json::to_value(p.status)
                .ok()
                .and_then(|v| v.as_str().map(str::to_owned))
                .unwrap_or_default(),
            p.last_error
                .as_ref()
                .map(|e| format!(" — {e}"))
                .unwrap_or_default()
        ));
    }
    s.trim_end().to_owned()
}

fn pending_text(rows: &[holdfast_client::store::pending::Row]) -> String {
    if rows.is_empty() {
        return "Nothing pending: the server has everything.".to_owned();
    }
    let mut s = format!(
        "{} act(s) not yet on the server, in the order they were made:\n",
        rows.len()
    );
    for r in rows {
        s.push_str(&format!(
            "#{:<5} {}  order {}  {}\n       {} {}  base v{}  key {}  [{}, {} attempt(s)]{}\n",
            r.seq,
            time(r.created_at)
                .map(|t| t.format("%Y-%m-%d %H:%M:%S").to_string())
                .unwrap_or_default(),
            r.order_id,
            r.act.describe(),
            r.request.method,
            r.request.path,
            r.base_version,
            r.key,
            serde_json::to_value(r.status)
                .ok()
                .and_then(|v| v.as_str().map(str::to_owned))
                .unwrap_or_default(),
            r.attempts,
            r.last_error
                .as_ref()
                .map(|e| format!("\n       last error: {e}"))
                .unwrap_or_default()
        ));
    }
    s.trim_end().to_owned()
}
