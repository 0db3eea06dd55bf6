//! What each subcommand does: open the engine, turn the arguments into ids
//! and acts, call the engine, try one sync pass after an act (unless
//! `--no-sync`), and hand the result to [`crate::render`].

use std::io::BufRead;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use anyhow::{anyhow, bail, Context};
use holdfast_client::conflict::{Choice, Resolution};
use holdfast_client::engine::RejectionChoice;
use holdfast_client::token::{FileTokens, KeyringTokens, TokenStore};
use holdfast_client::view::OrderView;
use holdfast_client::{Engine, EngineEvent, Error, NewOrder, SyncConfig, SyncReport};
use holdfast_protocol::model::{OrderHeaderSet, OrderStatus};
use serde_json::{json, Value};
use uuid::Uuid;

use crate::args::{Cli, Command, LoginArgs, OrderCommand, ResolveCommand};
use crate::render::{
    act_text, conflicts_text, customers_text, held_text, order_text, orders_text, pending_json,
    pending_text, rejections_text, short, skus_text, status_text, sync_json, sync_text, Out,
};

fn default_store() -> PathBuf {
    let base = std::env::var_os("XDG_DATA_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("APPDATA").map(PathBuf::from))
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".local/share")))
        .unwrap_or_else(|| PathBuf::from("."));
    base.join("holdfast").join("desk.db")
}

/// Exit code of a sync that could not reach the server (nothing is lost).
const OFFLINE: u8 = 2;

pub(crate) async fn run(cli: Cli) -> anyhow::Result<ExitCode> {
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
        Command::Logout => logout(&engine, &out).await,
        Command::Status => {
            let s = engine.status()?;
            out.print(&s, || status_text(&s));
            Ok(ExitCode::SUCCESS)
        }
        Command::Orders { status } => orders(&engine, &out, status),
        Command::Order(cmd) => order(&engine, &out, cmd, !cli.no_sync).await,
        Command::Skus { query, limit } => {
            let skus = engine.skus(&query.join(" "), limit)?;
            out.print(&skus, || skus_text(&skus));
            Ok(ExitCode::SUCCESS)
        }
        Command::Customers => {
            let cs = engine.customers()?;
            out.print(&cs, || customers_text(&cs));
            Ok(ExitCode::SUCCESS)
        }
        Command::Sync {
            watch,
            pull_only,
            push_only,
        } => sync(&engine, &out, watch, pull_only, push_only).await,
        Command::Pending => {
            let rows = engine.pending_rows()?;
            out.print(&pending_json(&rows), || pending_text(&rows));
            Ok(ExitCode::SUCCESS)
        }
        Command::Conflicts => {
            let cs = engine.conflicts()?;
            out.print(&cs, || conflicts_text(&cs));
            Ok(ExitCode::SUCCESS)
        }
        Command::Rejections => {
            let rs = engine.rejections()?;
            out.print(&rs, || rejections_text(&rs));
            Ok(ExitCode::SUCCESS)
        }
        Command::Resolve(cmd) => resolve(&engine, &out, cmd, !cli.no_sync).await,
        Command::Held { export } => {
            let held = engine.held()?;
            let exported = match &export {
                Some(path) => Some((path, engine.export_held(path)?)),
                None => None,
            };
            out.print(
                &json!({"held": held, "exported_to": exported.map(|(p, _)| p.display().to_string())}),
                || {
                    let mut text = held_text(&held);
                    if let Some((path, n)) = exported {
                        text.push_str(&format!("\nSaved {n} item(s) to {}.", path.display()));
                    }
                    text
                },
            );
            Ok(ExitCode::SUCCESS)
        }
    }
}

async fn logout(engine: &Engine, out: &Out) -> anyhow::Result<ExitCode> {
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

fn orders(engine: &Engine, out: &Out, status: Option<String>) -> anyhow::Result<ExitCode> {
    let want = status
        .as_deref()
        .map(|s| OrderStatus::parse(s).ok_or_else(|| anyhow!("unknown status {s:?}")))
        .transpose()?;
    let views: Vec<OrderView> = engine
        .orders()?
        .into_iter()
        .filter(|v| want.is_none_or(|w| v.order.status == w))
        .collect();
    out.print(&views, || orders_text(engine, &views));
    Ok(ExitCode::SUCCESS)
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
        act_text(engine, &result, view.as_ref(), synced.as_ref())
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
                        EngineEvent::SignedOut { reason } => {
                            format!("{reason} Log in again; nothing queued is lost.")
                        }
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
