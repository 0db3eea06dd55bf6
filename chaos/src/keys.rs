//! What each desk saw happen to every mutation it minted: the scenario's own
//! record, kept outside the desk's store, against which the server's tables
//! are audited at the end.
//!
//! A key is born when its act (or a resolution's re-issue) appears in the
//! desk's pending queue, and ends in exactly one state:
//! - acknowledged: the desk deleted its row after a 2xx (only a 2xx does
//!   that while the scenario is not resolving anything);
//! - conflicted / rejected: the server's answer sits on the row;
//! - superseded: a resolution re-keyed or dropped the row while it was held
//!   behind a conflict or rejection (never sent, or answered 424).

use std::collections::HashMap;

use holdfast_client::act::Act;
use holdfast_client::store::pending::{Row, Status};
use holdfast_client::RejectionChoice;
use uuid::Uuid;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeyState {
    Queued,
    Acked,
    Conflicted,
    Rejected,
    Superseded,
    /// The desk could not read its own row (in quarantine): never expected
    /// in a chaos run, where every desk is this build.
    Quarantined,
}

impl KeyState {
    fn of(status: Status) -> KeyState {
        match status {
            Status::Queued => KeyState::Queued,
            Status::Conflict => KeyState::Conflicted,
            Status::Rejected => KeyState::Rejected,
            Status::Quarantined => KeyState::Quarantined,
        }
    }
}

#[derive(Debug, Clone)]
pub struct KeyInfo {
    pub desk: usize,
    pub order_id: Uuid,
    pub act: Act,
    pub state: KeyState,
    /// The problem code of a rejection, as the desk recorded it.
    pub code: Option<String>,
}

/// One desk's keys.
#[derive(Debug, Default)]
pub struct Keys {
    desk: usize,
    map: HashMap<String, KeyInfo>,
    /// Keys in the order they were first seen.
    seen: Vec<String>,
    /// A key the desk had acknowledged came back (must never happen).
    pub resurrected: Vec<String>,
}

/// What a vanished queued row means.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Vanished {
    /// After a sync: the server accepted it.
    Acked,
    /// After a resolution: it was re-keyed or dropped unsent.
    Superseded,
}

impl Keys {
    pub fn new(desk: usize) -> Keys {
        Keys {
            desk,
            ..Keys::default()
        }
    }

    /// Brings the record up to date with the desk's pending rows.
    /// `codes` maps a rejected row's key to its problem code.
    pub fn observe(&mut self, rows: &[Row], codes: &HashMap<String, String>, vanished: Vanished) {
        let mut present: HashMap<&str, &Row> = HashMap::with_capacity(rows.len());
        for row in rows {
            present.insert(row.key.as_str(), row);
        }
        for (key, info) in self.map.iter_mut() {
            match present.get(key.as_str()) {
                None if info.state == KeyState::Queued => {
                    info.state = match vanished {
                        Vanished::Acked => KeyState::Acked,
                        Vanished::Superseded => KeyState::Superseded,
                    };
                }
                None => {}
                Some(_) if info.state == KeyState::Acked || info.state == KeyState::Superseded => {
                    self.resurrected.push(key.clone());
                }
                Some(row) => {
                    let state = KeyState::of(row.status);
                    info.state = state;
                    if state == KeyState::Rejected && info.code.is_none() {
                        info.code = codes.get(key).cloned();
                    }
                }
            }
        }
        for row in rows {
            if self.map.contains_key(&row.key) {
                continue;
            }
            let state = KeyState::of(row.status);
            self.map.insert(
                row.key.clone(),
                KeyInfo {
                    desk: self.desk,
                    order_id: row.order_id,
                    act: row.act.clone(),
                    state,
                    code: codes.get(&row.key).cloned(),
                },
            );
            self.seen.push(row.key.clone());
        }
    }

    pub fn get(&self, key: &str) -> Option<&KeyInfo> {
        self.map.get(key)
    }

    pub fn iter(&self) -> impl Iterator<Item = (&String, &KeyInfo)> {
        self.seen
            .iter()
            .filter_map(|k| self.map.get(k).map(|i| (k, i)))
    }

    pub fn len(&self) -> usize {
        self.map.len()
    }

    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }

    pub fn count(&self, state: KeyState) -> usize {
        self.map.values().filter(|i| i.state == state).count()
    }
}

/// The choice a user would most likely make, weighted by a roll in [0, 1).
pub fn pick_rejection_choice(choices: &[RejectionChoice], roll: f64) -> Option<RejectionChoice> {
    let weight = |c: &RejectionChoice| match c {
        RejectionChoice::Dismiss => 4.0,
        RejectionChoice::ReduceToAts { .. } => 3.0,
        RejectionChoice::RemoveLine => 1.5,
        RejectionChoice::TryAgain => 1.5,
    };
    let total: f64 = choices.iter().map(weight).sum();
    let mut at = roll * total;
    for c in choices {
        at -= weight(c);
        if at < 0.0 {
            return Some(c.clone());
        }
    }
    choices.last().cloned()
}
