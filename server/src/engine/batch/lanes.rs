//! A batch split into lanes: groups of items that share no row a mutation
//! locks or decides on, so that `batch::push` can apply each group in batch
//! order on its own connection, side by side with the others.
//!
//! Why: one connection applying items one after another leaves the database
//! waiting on that connection's chain of round trips (BENCHMARKS.md, 4a: the
//! cores were half idle during a push). Two chains keep both busy.
//!
//! Two items are put in the same lane when, run apart, one could see the
//! other's effects or wait on its locks:
//!
//! * they are on the same order (its version, its lock, `blocked_by_earlier`);
//! * they carry the same idempotency key (a chunk answers a repeated key from
//!   its own kept answers);
//! * their orders touch the same SKU: a line added in the batch, or a line the
//!   order already has (an allocation, a release, a removal or a cancel
//!   writes that SKU's position row);
//! * their orders are confirmed or cancelled for the same customer (the credit
//!   check reads the customer's open invoices under the customer's lock).
//!
//! Lanes are only a schedule, never a guarantee: every item still runs
//! through the same engine, with the same locks and checks, as a REST call.
//! The existing lines are read before the lanes start, so a line that another
//! desk adds meanwhile can make two lanes meet on a SKU row; they then wait
//! on each other's lock like two desks would, and answer the same.

use std::collections::HashMap;

use holdfast_protocol::mutation::Mutation;
use uuid::Uuid;

use super::Item;

/// How many lanes a push is applied in at most: one connection each.
pub(super) const LANES: usize = 2;

/// What the database already holds for an order of the batch.
pub(super) struct Existing {
    pub order: Uuid,
    pub customer: Uuid,
    /// The SKUs of its lines.
    pub skus: Vec<Uuid>,
}

/// A thing two items may share: what joins them into one group.
#[derive(PartialEq, Eq, Hash)]
enum Node {
    Item(usize),
    Order(Uuid),
    Key(String),
    Sku(Uuid),
    Customer(Uuid),
}

/// The batch's items grouped by what they share (union–find over `Node`s).
pub(super) struct Groups {
    ids: HashMap<Node, usize>,
    parent: Vec<usize>,
    /// Orders with a confirm or cancel in the batch, and each order's
    /// customer as far as it is known.
    settled: Vec<Uuid>,
    customers: HashMap<Uuid, Uuid>,
    items: usize,
}

impl Groups {
    /// The groups the batch alone shows; `Existing` rows may join more.
    pub(super) fn of(items: &[Item]) -> Self {
        let mut groups = Groups {
            ids: HashMap::new(),
            parent: Vec::new(),
            settled: Vec::new(),
            customers: HashMap::new(),
            items: items.len(),
        };
        // Item `i` is node `i`, and so the root of its group is an item.
        for i in 0..items.len() {
            groups.node(Node::Item(i));
        }
        for (i, item) in items.iter().enumerate() {
            let me = i;
            let key = groups.node(Node::Key(item.key.clone()));
            groups.join(me, key);
            let Some(order) = item.order else { continue };
            let on = groups.node(Node::Order(order));
            groups.join(me, on);
            match item.request.as_ref().map(|r| &r.mutation) {
                Ok(Mutation::AddLine { sku_id, .. }) => {
                    let sku = groups.node(Node::Sku(*sku_id));
                    groups.join(on, sku);
                }
                Ok(Mutation::CreateOrder { customer_id, .. }) => {
                    groups.customers.entry(order).or_insert(*customer_id);
                }
                Ok(Mutation::Confirm { .. } | Mutation::Cancel { .. }) => {
                    groups.settled.push(order)
                }
                _ => {}
            }
        }
        groups
    }

    /// The batch's orders, each once.
    pub(super) fn orders(&self) -> Vec<Uuid> {
        self.ids
            .keys()
            .filter_map(|n| match n {
                Node::Order(o) => Some(*o),
                _ => None,
            })
            .collect()
    }

    /// True when the batch is one group, whatever the database holds.
    pub(super) fn is_one(&mut self) -> bool {
        (1..self.items).all(|i| self.find(i) == self.find(0))
    }

    /// Joins what the database holds: each order with its lines' SKUs, and
    /// confirmed or cancelled orders with their customer.
    pub(super) fn add_existing(&mut self, existing: &[Existing]) {
        for e in existing {
            let on = self.node(Node::Order(e.order));
            for sku in &e.skus {
                let sku = self.node(Node::Sku(*sku));
                self.join(on, sku);
            }
            // An order that exists keeps the customer it has (a create in the
            // batch is then a replay).
            self.customers.insert(e.order, e.customer);
        }
        for order in std::mem::take(&mut self.settled) {
            let Some(customer) = self.customers.get(&order).copied() else {
                continue; // no such order: the item answers 404, touching nothing
            };
            let on = self.node(Node::Order(order));
            let by = self.node(Node::Customer(customer));
            self.join(on, by);
        }
    }

    /// The lane of every item: whole groups, the largest first, each into
    /// the lane with the fewest items so far, at most `lanes` lanes.
    pub(super) fn lanes(&mut self, lanes: usize) -> Vec<usize> {
        let roots: Vec<usize> = (0..self.items).map(|i| self.find(i)).collect();
        let mut sizes: HashMap<usize, usize> = HashMap::new();
        for root in &roots {
            *sizes.entry(*root).or_default() += 1;
        }
        let mut by_size: Vec<(usize, usize)> = sizes.into_iter().collect();
        // Ties broken by root so the same batch always splits the same way.
        by_size.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
        let mut load = vec![0; lanes.max(1)];
        let mut lane_of_root = vec![0; self.items];
        for (root, size) in by_size {
            let (lane, _) = load
                .iter()
                .enumerate()
                .min_by_key(|(lane, items)| (**items, *lane))
                .unwrap_or((0, &0));
            load[lane] += size;
            lane_of_root[root] = lane;
        }
        roots.iter().map(|&r| lane_of_root[r]).collect()
    }

    fn node(&mut self, node: Node) -> usize {
        let next = self.parent.len();
        let id = *self.ids.entry(node).or_insert(next);
        if id == next {
            self.parent.push(next);
        }
        id
    }

    fn find(&mut self, mut i: usize) -> usize {
        while self.parent[i] != i {
            self.parent[i] = self.parent[self.parent[i]];
            i = self.parent[i];
        }
        i
    }

    fn join(&mut self, a: usize, b: usize) {
        let (a, b) = (self.find(a), self.find(b));
        if a != b {
            // The smaller id stays the root: a group's root is its first item.
            self.parent[a.max(b)] = a.min(b);
        }
    }
}

#[cfg(test)]
mod tests {
    use holdfast_protocol::model::PushItem;
    use serde_json::{json, Value};

    use super::*;

    fn item(key: &str, method: &str, path: String, body: Value) -> Item {
        Item::new(&PushItem {
            idempotency_key: key.to_owned(),
            method: method.to_owned(),
            path,
            body,
        })
    }

    fn create(key: &str, order: Uuid, customer: Uuid) -> Item {
        let body = json!({"id": order, "customer_id": customer});
        item(key, "POST", "/v1/orders".into(), body)
    }

    fn add_line(key: &str, order: Uuid, sku: Uuid) -> Item {
        let body =
            json!({"id": Uuid::new_v4(), "sku_id": sku, "qty_ordered": 2, "base_version": 1});
        item(key, "POST", format!("/v1/orders/{order}/lines"), body)
    }

    fn allocate(key: &str, order: Uuid, line: Uuid) -> Item {
        let path = format!("/v1/orders/{order}/lines/{line}/allocate");
        item(key, "POST", path, json!({"qty": 1}))
    }

    fn confirm(key: &str, order: Uuid) -> Item {
        let path = format!("/v1/orders/{order}/confirm");
        item(key, "POST", path, json!({"base_version": 3}))
    }

    fn lanes(items: &[Item], existing: &[Existing]) -> Vec<usize> {
        let mut groups = Groups::of(items);
        groups.add_existing(existing);
        groups.lanes(LANES)
    }

    fn ids() -> [Uuid; 4] {
        [(); 4].map(|_| Uuid::new_v4())
    }

    #[test]
    fn orders_that_share_nothing_go_side_by_side_each_whole() {
        let ([a, b, ..], [x, y, ..], customer) = (ids(), ids(), Uuid::new_v4());
        let items = [
            create("k1", a, customer),
            create("k2", b, customer),
            add_line("k3", a, x),
            add_line("k4", b, y),
            add_line("k5", a, x),
        ];
        let lane = lanes(&items, &[]);
        assert_eq!(
            [lane[0], lane[2], lane[4]],
            [lane[0]; 3],
            "order a is split"
        );
        assert_eq!(lane[1], lane[3], "order b is split");
        assert_ne!(lane[0], lane[1], "two independent orders in one lane");
        assert!(!Groups::of(&items).is_one());
    }

    #[test]
    fn a_sku_added_on_two_orders_keeps_them_in_one_lane() {
        let ([a, b, ..], [x, ..], customer) = (ids(), ids(), Uuid::new_v4());
        let items = [
            create("k1", a, customer),
            create("k2", b, customer),
            add_line("k3", a, x),
            add_line("k4", b, x),
        ];
        assert!(Groups::of(&items).is_one());
        assert_eq!(lanes(&items, &[]), vec![0; 4]);
    }

    #[test]
    fn a_sku_an_order_already_has_joins_it_to_the_order_adding_that_sku() {
        let ([a, b, ..], [x, ..], [line, ..]) = (ids(), ids(), ids());
        // Order a exists with a line on x; the batch allocates on that line.
        let items = [allocate("k1", a, line), add_line("k2", b, x)];
        assert!(!Groups::of(&items).is_one());
        let existing = Existing {
            order: a,
            customer: Uuid::new_v4(),
            skus: vec![x],
        };
        let lane = lanes(&items, &[existing]);
        assert_eq!(lane[0], lane[1]);
    }

    #[test]
    fn one_key_on_two_orders_keeps_them_in_one_lane() {
        let ([a, b, ..], customer) = (ids(), Uuid::new_v4());
        let items = [create("same", a, customer), create("same", b, customer)];
        let lane = lanes(&items, &[]);
        assert_eq!(lane[0], lane[1]);
    }

    #[test]
    fn confirms_share_a_lane_only_when_they_share_a_customer() {
        let ([a, b, c, d], [one, other, ..]) = (ids(), ids());
        let items = [confirm("k1", a), confirm("k2", b), confirm("k3", c)];
        let existing = |order, customer| Existing {
            order,
            customer,
            skus: vec![],
        };
        // a and b are one customer's, c another's.
        let lane = lanes(
            &items,
            &[existing(a, one), existing(b, one), existing(c, other)],
        );
        assert_eq!(lane[0], lane[1], "one customer's confirms split");
        assert_ne!(lane[0], lane[2]);
        // An order's create in the batch names its customer too.
        let items = [create("k4", d, one), confirm("k5", d), confirm("k6", a)];
        let lane = lanes(&items, &[existing(a, one)]);
        assert_eq!(lane[1], lane[2]);
        // Edits that are not confirms or cancels never join on the customer.
        let items = [create("k7", d, one), create("k8", c, one)];
        let lane = lanes(&items, &[]);
        assert_ne!(lane[0], lane[1]);
    }

    #[test]
    fn groups_are_spread_so_the_lanes_hold_about_as_many_items() {
        let orders: Vec<Uuid> = (0..6).map(|_| Uuid::new_v4()).collect();
        let customer = Uuid::new_v4();
        // Order 0 has three items, the others one each.
        let mut items: Vec<Item> = orders
            .iter()
            .enumerate()
            .map(|(i, o)| create(&format!("c{i}"), *o, customer))
            .collect();
        items.push(add_line("l1", orders[0], Uuid::new_v4()));
        items.push(add_line("l2", orders[0], Uuid::new_v4()));
        let lane = lanes(&items, &[]);
        let mut load = [0; LANES];
        for l in &lane {
            load[*l] += 1;
        }
        assert_eq!(load.iter().sum::<usize>(), items.len());
        let (most, least) = (load.iter().max(), load.iter().min());
        assert!(most.zip(least).is_some_and(|(m, l)| m - l <= 1), "{load:?}");
    }
}
