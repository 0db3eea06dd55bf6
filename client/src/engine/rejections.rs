//! Rejections: acts the server refused, with the facts that explain the
//! refusal and the choices the user has (reduce, remove the line, try again,
//! dismiss), and acting on one of those choices.

use holdfast_protocol::model::Order;
use holdfast_protocol::problem::ProblemCode;
use rusqlite::Transaction;
use serde::Serialize;
use serde_json::{Map, Value};
use uuid::Uuid;

use super::acts::rechain;
use super::{new_key, Engine, Error, Result};
use crate::act::Act;
use crate::store::{now_ms, orders, pending, rejections, skus, StoreError};

/// What the user may do about a rejected act.
#[derive(ts_rs::TS, Debug, Clone, PartialEq, Eq, Serialize, serde::Deserialize)]
#[serde(tag = "choice", rename_all = "snake_case")]
pub enum RejectionChoice {
    /// Allocate what is there instead (a new act).
    ReduceToAts { qty: i64 },
    /// Remove the line instead (releases what it holds).
    RemoveLine,
    /// Send the same act again as a new intention (new key).
    TryAgain,
    /// Drop it.
    Dismiss,
}

impl RejectionChoice {
    pub fn name(&self) -> &'static str {
        match self {
            RejectionChoice::ReduceToAts { .. } => "reduce",
            RejectionChoice::RemoveLine => "remove-line",
            RejectionChoice::TryAgain => "retry",
            RejectionChoice::Dismiss => "dismiss",
        }
    }
}

/// A rejected act with its facts and choices.
#[derive(ts_rs::TS, Debug, Clone, Serialize)]
pub struct RejectionView {
    pub id: i64,
    pub order_id: Uuid,
    pub idempotency_key: String,
    pub act: String,
    pub kind: &'static str,
    pub http_status: u16,
    pub code: ProblemCode,
    pub detail: Option<String>,
    /// The problem's extension members (e.g. `ats_available`, `requested`),
    /// plus `ats_now` (the freshest ATS this desk knows: the rejection's, or
    /// a position learned after it) where it applies.
    pub facts: Map<String, Value>,
    pub choices: Vec<RejectionChoice>,
    pub created_at: i64,
}

impl Engine {
    fn rejection_view_in(
        tx: &Transaction<'_>,
        record: &rejections::Record,
    ) -> Result<Option<RejectionView>, StoreError> {
        let Some(row) = pending::get(tx, record.pending_seq)? else {
            return Ok(None);
        };
        let p = &record.problem;
        let mut facts = p.extensions.clone();
        let mut choices = Vec::new();
        let line_sku = |line_id: Uuid| -> Result<Option<Uuid>, StoreError> {
            let from_doc = |o: &Order| o.lines.iter().find(|l| l.id == line_id).map(|l| l.sku_id);
            Ok(row
                .base_doc
                .as_ref()
                .and_then(from_doc)
                .or(orders::get(tx, row.order_id)?.as_ref().and_then(from_doc)))
        };
        let int = |name: &str| p.extension(name).and_then(Value::as_i64);
        if let Act::Allocate { line_id, qty, .. } = &row.act {
            match p.code {
                ProblemCode::InsufficientAts => {
                    let sku = line_sku(*line_id)?;
                    // "Now": the server's number at the rejection, unless a
                    // later pull or answer told us the position since.
                    let learned = match sku {
                        Some(s) => skus::ats_learned(tx, s)?,
                        None => None,
                    };
                    let ats_now = match (learned, int("ats_available")) {
                        (Some((ats, at)), _) if at > record.created_at => ats,
                        (_, Some(ats)) => ats,
                        (Some((ats, _)), None) => ats,
                        (None, None) => 0,
                    };
                    facts.insert("ats_now".into(), ats_now.into());
                    if let Some(s) = sku {
                        facts.insert("sku_id".into(), s.to_string().into());
                    }
                    let reduce = ats_now.min(*qty);
                    if reduce >= 1 {
                        choices.push(RejectionChoice::ReduceToAts { qty: reduce });
                    }
                }
                ProblemCode::OverAllocation => {
                    if let (Some(ordered), Some(allocated)) =
                        (int("qty_ordered"), int("qty_allocated"))
                    {
                        let room = (ordered - allocated).min(*qty);
                        if room >= 1 {
                            choices.push(RejectionChoice::ReduceToAts { qty: room });
                        }
                    }
                }
                _ => {}
            }
        }
        if matches!(
            row.act,
            Act::Allocate { .. } | Act::Release { .. } | Act::ChangeLine { .. }
        ) && p.code != ProblemCode::NotFound
        {
            choices.push(RejectionChoice::RemoveLine);
        }
        choices.push(RejectionChoice::TryAgain);
        choices.push(RejectionChoice::Dismiss);
        Ok(Some(RejectionView {
            id: record.id,
            order_id: record.order_id,
            idempotency_key: record.key.clone(),
            act: row.act.describe(),
            kind: row.act.kind(),
            http_status: p.status,
            code: p.code,
            detail: p.detail.clone(),
            facts,
            choices,
            created_at: record.created_at,
        }))
    }

    pub fn rejections(&self) -> Result<Vec<RejectionView>> {
        Ok(self.inner.store.read(|tx| {
            let mut out = Vec::new();
            for r in rejections::list(tx)? {
                out.extend(Self::rejection_view_in(tx, &r)?);
            }
            Ok(out)
        })?)
    }

    /// Acts on a rejection with one of its offered choices.
    pub fn resolve_rejection(&self, id: i64, choice: &RejectionChoice) -> Result<()> {
        let mut failure: Option<Error> = None;
        self.inner.store.write(|tx| {
            let fail =
                |e: Error| -> Result<(), StoreError> { Err(StoreError::Invalid(e.to_string())) };
            let Some(record) = rejections::get(tx, id)? else {
                failure = Some(Error::NotFound(format!("no open rejection {id}")));
                return Ok(());
            };
            let Some(view) = Self::rejection_view_in(tx, &record)? else {
                return fail(Error::NotFound(format!(
                    "rejection {id} has no pending act"
                )));
            };
            let offered = view.choices.iter().any(|c| match (c, choice) {
                (RejectionChoice::ReduceToAts { .. }, RejectionChoice::ReduceToAts { .. }) => true,
                (a, b) => a == b,
            });
            if !offered {
                failure = Some(Error::Invalid(format!(
                    "`{}` is not a choice for this rejection; choose one of: {}",
                    choice.name(),
                    view.choices
                        .iter()
                        .map(|c| c.name())
                        .collect::<Vec<_>>()
                        .join(", ")
                )));
                return Ok(());
            }
            let Some(row) = pending::get(tx, record.pending_seq)? else {
                return Ok(());
            };
            let now = now_ms();
            let replace = |act: &Act| {
                pending::replace(
                    tx,
                    row.seq,
                    &new_key(),
                    act,
                    row.base_version,
                    row.base_doc.as_ref(),
                    now,
                )
            };
            match (choice, &row.act) {
                (
                    RejectionChoice::ReduceToAts { qty },
                    Act::Allocate {
                        order_id, line_id, ..
                    },
                ) => {
                    if *qty < 1 {
                        failure = Some(Error::Invalid("nothing to allocate".into()));
                        return Ok(());
                    }
                    replace(&Act::Allocate {
                        order_id: *order_id,
                        line_id: *line_id,
                        qty: *qty,
                    })?;
                }
                (RejectionChoice::RemoveLine, act) => {
                    let line_id = act.line_id().ok_or_else(|| {
                        StoreError::Invalid("this act is not about a line".into())
                    })?;
                    // Removing bumps the version by 1 like the act it
                    // replaces, so the acts after it keep their bases.
                    replace(&Act::RemoveLine {
                        order_id: row.order_id,
                        line_id,
                        base_version: row.base_version,
                    })?;
                }
                (RejectionChoice::TryAgain, act) => replace(act)?,
                (RejectionChoice::Dismiss, _) => {
                    let me = Self::me(tx).map_err(|e| StoreError::Invalid(e.to_string()))?;
                    pending::delete(tx, row.seq)?;
                    // The acts after it were counted on its +1; they lose it.
                    let later: Vec<(pending::Row, Option<Act>)> =
                        pending::for_order(tx, row.order_id)?
                            .into_iter()
                            .filter(|r| r.seq > row.seq)
                            .map(|r| {
                                let act = r.act.clone();
                                (r, Some(act))
                            })
                            .collect();
                    rechain(tx, &me, later, row.base_version, row.base_doc.clone(), None)?;
                }
                (RejectionChoice::ReduceToAts { .. }, _) => {
                    failure = Some(Error::Invalid("only an allocation can be reduced".into()));
                    return Ok(());
                }
            }
            rejections::close(tx, id)?;
            Ok(())
        })?;
        if let Some(e) = failure {
            return Err(e);
        }
        self.changed_locally();
        self.sync_soon();
        Ok(())
    }
}
