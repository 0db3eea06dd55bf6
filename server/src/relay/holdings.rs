//! What a relay holds between passes: the deliveries it claimed or was
//! handed, waiting per partner for a sending slot, and the attempts in
//! flight; and what each pass may take next, from the room that leaves.

use std::collections::{HashMap, HashSet, VecDeque};

use uuid::Uuid;

use super::claim::{self, Claimed};
use super::Settings;

/// A fan-out takes at least this many events when it has any room, so a
/// partner whose share is full (its overflow becomes rows) slows, but never
/// stops, the fan-out for the others.
const MIN_FAN_OUT: usize = 32;

/// One claimed delivery and the lease it was claimed under.
pub(super) struct Held {
    pub(super) delivery: Claimed,
    pub(super) lease_id: Uuid,
}

/// What this relay holds: claimed deliveries waiting for a sending slot,
/// and the attempts in flight, per partner.
#[derive(Default)]
pub(super) struct Holdings {
    waiting: HashMap<Uuid, VecDeque<Held>>,
    sending: HashMap<Uuid, usize>,
}

impl Holdings {
    pub(super) fn held(&self, partner: &Uuid) -> usize {
        self.waiting.get(partner).map_or(0, VecDeque::len)
            + self.sending.get(partner).copied().unwrap_or(0)
    }

    pub(super) fn total(&self) -> usize {
        self.waiting.values().map(VecDeque::len).sum::<usize>()
            + self.sending.values().sum::<usize>()
    }

    fn sending_total(&self) -> usize {
        self.sending.values().sum()
    }

    /// What each partner this relay holds anything of may still be given.
    pub(super) fn room(&self, per_partner: usize) -> Vec<(Uuid, i64)> {
        let partners: HashSet<&Uuid> = self.waiting.keys().chain(self.sending.keys()).collect();
        partners
            .into_iter()
            .map(|p| (*p, per_partner.saturating_sub(self.held(p)) as i64))
            .collect()
    }

    /// How many events the next fan-out should take: no more than the relay
    /// still holds room for, nor than the roomiest partner it holds can
    /// take (a partner it holds nothing of can take a whole share).
    pub(super) fn fan_out_limit(&self, settings: &Settings) -> usize {
        let total = settings.total_first().saturating_sub(self.total());
        if total == 0 {
            return 0;
        }
        let share = settings.per_partner_first();
        let roomiest = self
            .room(share)
            .iter()
            .map(|(_, room)| *room as usize)
            .max()
            .unwrap_or(share);
        roomiest
            .max(MIN_FAN_OUT)
            .min(total)
            .min(claim::FAN_OUT_BATCH as usize)
    }

    pub(super) fn finished(&mut self, partner: Uuid) {
        if let Some(n) = self.sending.get_mut(&partner) {
            *n -= 1;
            if *n == 0 {
                self.sending.remove(&partner);
            }
        }
    }

    /// The next deliveries to start: a partner's waiting ones while it has a
    /// free slot, within the relay's total.
    pub(super) fn next_to_send(&mut self, settings: &Settings) -> Vec<Held> {
        let mut out = Vec::new();
        let mut sending = self.sending_total();
        for (partner, queue) in &mut self.waiting {
            let busy = self.sending.entry(*partner).or_default();
            while *busy < settings.per_partner_in_flight && sending < settings.max_in_flight {
                let Some(next) = queue.pop_front() else { break };
                *busy += 1;
                sending += 1;
                out.push(next);
            }
        }
        self.waiting.retain(|_, q| !q.is_empty());
        self.sending.retain(|_, n| *n > 0);
        out
    }

    fn queue(&mut self, delivery: Claimed, lease_id: Uuid) {
        self.waiting
            .entry(delivery.partner_id)
            .or_default()
            .push_back(Held { delivery, lease_id });
    }

    /// Queues what a claim took. Returns whether more may be due than it
    /// could take: it got all it asked, or all a partner had room for.
    pub(super) fn take(&mut self, claim: Claim, per_partner: usize) -> bool {
        let handed_out = claim.fan_out_full;
        for d in claim.first {
            self.queue(d, claim.lease_id);
        }
        let mut got: HashMap<Uuid, usize> = HashMap::new();
        for d in &claim.claimed {
            *got.entry(d.partner_id).or_default() += 1;
        }
        let room = |partner: &Uuid| {
            claim
                .partners
                .iter()
                .find(|(p, _)| p == partner)
                .map_or(per_partner, |(_, r)| (*r).max(0) as usize)
        };
        // Rows the fan-out made for lack of room are due now, and only a
        // claim sends them: without a pass for them they waited for the poll.
        let more_due = handed_out
            || claim.overflow > 0
            || (claim.asked > 0 && claim.claimed.len() == claim.asked)
            || got.iter().any(|(partner, n)| *n >= room(partner));
        for d in claim.claimed {
            self.queue(d, claim.lease_id);
        }
        more_due
    }

    pub(super) fn drain_waiting(&mut self) -> Vec<Held> {
        self.waiting.drain().flat_map(|(_, q)| q).collect()
    }
}

/// What one pass took, and what it asked for.
pub(super) struct Claim {
    pub(super) lease_id: Uuid,
    pub(super) asked: usize,
    /// The room each partner had (absent: a whole share).
    pub(super) partners: Vec<(Uuid, i64)>,
    pub(super) claimed: Vec<Claimed>,
    /// First attempts the fan-out handed over, under `lease_id`.
    pub(super) first: Vec<Claimed>,
    /// The pass fanned out all it asked for: more new events may be waiting.
    pub(super) fan_out_full: bool,
    /// Deliveries its fan-out made rows for lack of room (`FannedOut::overflow`).
    pub(super) overflow: u64,
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn settings() -> Settings {
        Settings {
            max_attempts: 3,
            backoff_base_ms: 1,
            backoff_cap_ms: 1,
            timeout: Duration::from_secs(1),
            allow_private_targets: true,
            max_in_flight: 6,
            per_partner_in_flight: 2,
            poll: Duration::from_secs(1),
        }
    }

    fn delivery(partner: Uuid, id: i64) -> Claimed {
        Claimed {
            tenant_id: Uuid::nil(),
            id: Some(id),
            outbox_id: id,
            partner_id: partner,
            attempts: 0,
            first_attempt: true,
            url: "http://127.0.0.1/hook".into(),
            secret: String::new(),
            previous_secret: None,
            previous_secret_expires_at: None,
            payload: "{}".into(),
            event_created_at: chrono::Utc::now(),
        }
    }

    fn claim(partners: Vec<(Uuid, i64)>, asked: usize, claimed: Vec<Claimed>) -> Claim {
        Claim {
            lease_id: Uuid::new_v4(),
            asked,
            partners,
            claimed,
            first: Vec::new(),
            fan_out_full: false,
            overflow: 0,
        }
    }

    #[test]
    fn a_partner_sends_within_its_slots_and_the_rest_waits_in_order() {
        let s = settings();
        let (a, b) = (Uuid::from_u128(1), Uuid::from_u128(2));
        let mut holdings = Holdings::default();
        let got = (1..=5).map(|i| delivery(a, i)).chain([delivery(b, 6)]);
        // a got 5 of its share of 16: nothing more was due for it.
        assert!(!holdings.take(claim(vec![], 12, got.collect()), s.per_partner_held()));
        let first: Vec<i64> = holdings
            .next_to_send(&s)
            .iter()
            .filter_map(|h| h.delivery.id)
            .collect();
        let mut sorted = first.clone();
        sorted.sort();
        assert_eq!(
            sorted,
            vec![1, 2, 6],
            "two of a's (oldest first) and b's one"
        );
        assert!(holdings.next_to_send(&s).is_empty(), "a's slots are full");
        assert_eq!(
            (holdings.held(&a), holdings.held(&b), holdings.total()),
            (5, 1, 6)
        );
        holdings.finished(a);
        let next: Vec<i64> = holdings
            .next_to_send(&s)
            .iter()
            .filter_map(|h| h.delivery.id)
            .collect();
        assert_eq!(next, vec![3], "a freed slot takes a's next in line");
        let room = holdings.room(s.per_partner_held());
        assert!(
            room.contains(&(a, 12)) && room.contains(&(b, 15)),
            "{room:?}"
        );
    }

    #[test]
    fn a_claim_that_fills_a_share_or_its_ask_says_more_may_be_due() {
        let s = settings();
        let a = Uuid::from_u128(1);
        let mut holdings = Holdings::default();
        // a had room for 3 and got 3: its backlog may go on.
        let full_share = claim(vec![(a, 3)], 10, (1..=3).map(|i| delivery(a, i)).collect());
        assert!(holdings.take(full_share, s.per_partner_held()));
        // Everything asked for came back: there may be more.
        let full_ask = claim(vec![(a, 13)], 2, (4..=5).map(|i| delivery(a, i)).collect());
        assert!(holdings.take(full_ask, s.per_partner_held()));
        // Less than both: drained, until the next wake-up.
        let short = claim(vec![(a, 11)], 10, vec![delivery(a, 6)]);
        assert!(!holdings.take(short, s.per_partner_held()));
        let unsent: Vec<i64> = holdings
            .drain_waiting()
            .iter()
            .filter_map(|h| h.delivery.id)
            .collect();
        assert_eq!(unsent, vec![1, 2, 3, 4, 5, 6]);
    }
}
