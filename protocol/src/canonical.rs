//! Canonical JSON and the idempotency request fingerprint of API.md, so that
//! the desktop client and the server hash the same intention to the same hex.
//!
//! Canonical form: object keys sorted by the bytes of their UTF-8 encoding
//! (which is the same as Unicode code point order), no whitespace between
//! tokens, arrays in their given order, and strings and numbers written
//! exactly as `serde_json` writes them.
//!
//! This is deliberately not RFC 8785 (JCS): JCS sorts by UTF-16 code units and
//! has its own number formatting. The two orders only differ for keys that mix
//! characters in U+E000..=U+FFFF with characters beyond U+FFFF, and both sides
//! of Holdfast call this one function, so the simpler order is enough.

use serde::{Serialize, Serializer};
use serde_json::Value;
use sha2::{Digest, Sha256};

/// `value` in canonical form (see the module docs).
pub fn canonical_json(value: &Value) -> String {
    serde_json::to_string(&Sorted(value))
        // Writing to a String only fails for non-string map keys or a
        // Serialize impl that returns an error; JSON values have neither.
        .expect("serializing a serde_json::Value to a String cannot fail")
}

/// The idempotency fingerprint: lowercase hex SHA-256 of
/// `METHOD + " " + PATH + " " + canonical(body)`.
///
/// The method is uppercased so `post` and `POST` are one intention. Only ASCII
/// letters change: HTTP methods are ASCII tokens, and full Unicode
/// uppercasing (`ß` → `SS`) could make two different strings collide.
pub fn request_fingerprint(method: &str, path: &str, body: &Value) -> String {
    let mut hasher = Sha256::new();
    hasher.update(method.to_ascii_uppercase().as_bytes());
    hasher.update(b" ");
    hasher.update(path.as_bytes());
    hasher.update(b" ");
    hasher.update(canonical_json(body).as_bytes());
    hex::encode(hasher.finalize())
}

/// The fingerprint of a request whose body is not JSON (a CSV import): the
/// same shape as [`request_fingerprint`] over the body's exact bytes, since a
/// file has no canonical form.
pub fn raw_request_fingerprint(method: &str, path: &str, body: &[u8]) -> String {
    let mut hasher = Sha256::new();
    hasher.update(method.to_ascii_uppercase().as_bytes());
    hasher.update(b" ");
    hasher.update(path.as_bytes());
    hasher.update(b" ");
    hasher.update(body);
    hex::encode(hasher.finalize())
}

/// Serializes a value with every object's keys sorted, reusing serde_json's
/// own escaping and number formatting for everything else.
struct Sorted<'a>(&'a Value);

impl Serialize for Sorted<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match self.0 {
            Value::Array(items) => serializer.collect_seq(items.iter().map(Sorted)),
            Value::Object(map) => {
                // serde_json's Map is already sorted unless some crate in the
                // build enables its `preserve_order` feature; sorting here
                // keeps the fingerprint independent of that feature flag.
                let mut entries: Vec<(&String, &Value)> = map.iter().collect();
                entries.sort_unstable_by(|a, b| a.0.as_bytes().cmp(b.0.as_bytes()));
                serializer.collect_map(entries.into_iter().map(|(k, v)| (k, Sorted(v))))
            }
            leaf => leaf.serialize(serializer),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use serde::de::{self, Deserialize, Deserializer, MapAccess, SeqAccess, Visitor};
    use serde_json::{json, Map, Number};
    use std::fmt;

    #[test]
    fn sorts_keys_at_every_depth_and_drops_whitespace() {
        let value: Value =
            serde_json::from_str(r#"{ "b": [ {"z": 1, "a": 2} ], "a": { "y": null, "x": true } }"#)
                .expect("valid JSON");
        assert_eq!(
            canonical_json(&value),
            r#"{"a":{"x":true,"y":null},"b":[{"a":2,"z":1}]}"#
        );
    }

    #[test]
    fn sorts_by_utf8_bytes_not_utf16() {
        // U+FF61 is one UTF-16 unit (0xFF61) and U+1F600 starts with the
        // surrogate 0xD83D, so UTF-16 order would put the emoji first.
        let value = json!({"\u{1F600}": 1, "\u{FF61}": 2, "Z": 3, "a": 4, "": 5});
        assert_eq!(
            canonical_json(&value),
            "{\"\":5,\"Z\":3,\"a\":4,\"\u{FF61}\":2,\"\u{1F600}\":1}"
        );
    }

    #[test]
    fn arrays_keep_their_order() {
        assert_eq!(canonical_json(&json!([3, 1, 2])), "[3,1,2]");
    }

    #[test]
    fn strings_and_numbers_are_written_as_serde_json_writes_them() {
        let text = "quote \" backslash \\ nl \n tab \t nul \u{0} del \u{7f} é 😀 </script>";
        assert_eq!(
            canonical_json(&json!(text)),
            serde_json::to_string(text).expect("serialize string")
        );
        let numbers: Value = serde_json::from_str(
            "[1.0, -0.0, 1e300, 0.1, 18446744073709551615, -9223372036854775808, 2.5E-3]",
        )
        .expect("valid JSON");
        assert_eq!(
            canonical_json(&numbers),
            serde_json::to_string(&numbers).expect("serialize numbers")
        );
    }

    #[test]
    fn fingerprint_matches_the_api_md_recipe() {
        let body = json!({"qty": 2, "base_version": 7});
        let expected = hex::encode(Sha256::digest(
            br#"POST /v1/orders/o1/lines/l1/allocate {"base_version":7,"qty":2}"#,
        ));
        assert_eq!(
            request_fingerprint("post", "/v1/orders/o1/lines/l1/allocate", &body),
            expected
        );
        assert_eq!(expected.len(), 64);
        assert!(expected
            .chars()
            .all(|c| c.is_ascii_digit() || ('a'..='f').contains(&c)));
    }

    // ---- property tests ----

    /// Random JSON values. serde_json (without its `float_roundtrip`
    /// feature) may parse a float's shortest text to a neighbouring f64, so
    /// tests that compare a value with its reparsed text pass `false` and get
    /// only short binary fractions, which its fast path parses exactly.
    fn arb_json(any_floats: bool) -> impl Strategy<Value = Value> {
        let exact_floats = (any::<i32>(), 0u32..6)
            .prop_filter_map("finite", |(m, e)| {
                Number::from_f64(f64::from(m) / f64::from(1u32 << e))
            })
            .prop_map(Value::Number);
        let floats = if any_floats {
            prop_oneof![
                exact_floats,
                any::<f64>()
                    .prop_filter_map("finite", Number::from_f64)
                    .prop_map(Value::Number),
            ]
            .boxed()
        } else {
            exact_floats.boxed()
        };
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::Bool),
            any::<i64>().prop_map(Value::from),
            any::<u64>().prop_map(Value::from),
            floats,
            any::<String>().prop_map(Value::String),
        ];
        leaf.prop_recursive(4, 48, 6, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
                // Short ASCII keys collide and share prefixes; arbitrary ones
                // bring escapes and multi-byte characters.
                prop::collection::btree_map(
                    prop_oneof!["[a-cA-C_]{0,3}", any::<String>()],
                    inner,
                    0..6
                )
                .prop_map(|m| Value::Object(m.into_iter().collect::<Map<_, _>>())),
            ]
        })
    }

    /// Writes `value` as JSON text with each object's keys in an order chosen
    /// by `seed` and, if `pretty`, with whitespace between every token.
    fn write_shuffled(value: &Value, seed: u64, pretty: bool, out: &mut String) {
        let gap = if pretty { "\n  \t " } else { "" };
        match value {
            Value::Array(items) => {
                out.push('[');
                for (i, item) in items.iter().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    out.push_str(gap);
                    write_shuffled(item, seed, pretty, out);
                }
                out.push_str(gap);
                out.push(']');
            }
            Value::Object(map) => {
                let mut keys: Vec<&String> = map.keys().collect();
                keys.sort_by_key(|k| {
                    let mut h = Sha256::new();
                    h.update(seed.to_le_bytes());
                    h.update(k.as_bytes());
                    h.finalize()
                });
                out.push('{');
                for (i, key) in keys.into_iter().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    out.push_str(gap);
                    out.push_str(&serde_json::to_string(key).expect("serialize key"));
                    out.push_str(gap);
                    out.push(':');
                    out.push_str(gap);
                    write_shuffled(&map[key], seed, pretty, out);
                }
                out.push_str(gap);
                out.push('}');
            }
            leaf => out.push_str(&leaf.to_string()),
        }
    }

    fn shuffled(value: &Value, seed: u64, pretty: bool) -> String {
        let mut out = String::new();
        write_shuffled(value, seed, pretty, &mut out);
        out
    }

    /// Deserializes only if every object's keys appear in strictly
    /// increasing byte order in the text, whatever Map type serde_json uses.
    struct KeysAscending;

    impl<'de> Deserialize<'de> for KeysAscending {
        fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
            d.deserialize_any(KeysAscendingVisitor)
        }
    }

    struct KeysAscendingVisitor;

    impl<'de> Visitor<'de> for KeysAscendingVisitor {
        type Value = KeysAscending;
        fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
            f.write_str("any JSON value")
        }
        fn visit_bool<E>(self, _: bool) -> Result<KeysAscending, E> {
            Ok(KeysAscending)
        }
        fn visit_i64<E>(self, _: i64) -> Result<KeysAscending, E> {
            Ok(KeysAscending)
        }
        fn visit_u64<E>(self, _: u64) -> Result<KeysAscending, E> {
            Ok(KeysAscending)
        }
        fn visit_f64<E>(self, _: f64) -> Result<KeysAscending, E> {
            Ok(KeysAscending)
        }
        fn visit_str<E>(self, _: &str) -> Result<KeysAscending, E> {
            Ok(KeysAscending)
        }
        fn visit_unit<E>(self) -> Result<KeysAscending, E> {
            Ok(KeysAscending)
        }
        fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<KeysAscending, A::Error> {
            while seq.next_element::<KeysAscending>()?.is_some() {}
            Ok(KeysAscending)
        }
        fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<KeysAscending, A::Error> {
            let mut previous: Option<String> = None;
            while let Some(key) = map.next_key::<String>()? {
                if previous
                    .as_ref()
                    .is_some_and(|p| p.as_bytes() >= key.as_bytes())
                {
                    return Err(de::Error::custom(format!("key {key:?} after {previous:?}")));
                }
                map.next_value::<KeysAscending>()?;
                previous = Some(key);
            }
            Ok(KeysAscending)
        }
    }

    /// True if `text` has whitespace outside string literals.
    fn has_insignificant_whitespace(text: &str) -> bool {
        let (mut in_string, mut escaped) = (false, false);
        for c in text.chars() {
            if in_string {
                match (escaped, c) {
                    (true, _) => escaped = false,
                    (false, '\\') => escaped = true,
                    (false, '"') => in_string = false,
                    _ => {}
                }
            } else if c == '"' {
                in_string = true;
            } else if c.is_whitespace() {
                return true;
            }
        }
        false
    }

    /// Paths to every scalar leaf and empty container, as indexes into
    /// arrays and keys into objects.
    fn leaf_paths(value: &Value, here: &mut Vec<Step>, out: &mut Vec<Vec<Step>>) {
        match value {
            Value::Array(items) if !items.is_empty() => {
                for (i, item) in items.iter().enumerate() {
                    here.push(Step::Index(i));
                    leaf_paths(item, here, out);
                    here.pop();
                }
            }
            Value::Object(map) if !map.is_empty() => {
                for (key, item) in map {
                    here.push(Step::Key(key.clone()));
                    leaf_paths(item, here, out);
                    here.pop();
                }
            }
            _ => out.push(here.clone()),
        }
    }

    #[derive(Clone, Debug)]
    enum Step {
        Index(usize),
        Key(String),
    }

    fn leaf_mut<'a>(value: &'a mut Value, path: &[Step]) -> &'a mut Value {
        path.iter().fold(value, |v, step| match step {
            Step::Index(i) => &mut v[*i],
            Step::Key(k) => &mut v[k.as_str()],
        })
    }

    /// A value whose canonical text is certainly different from `leaf`'s.
    fn changed(leaf: &Value) -> Value {
        match leaf {
            Value::Null => Value::Bool(false),
            Value::Bool(b) => Value::Bool(!b),
            Value::Number(n) => Value::String(n.to_string()),
            Value::String(s) => Value::String(format!("{s}x")),
            Value::Array(_) => json!([null]),
            Value::Object(_) => json!({"": null}),
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(512))]

        #[test]
        fn key_order_and_whitespace_never_change_the_fingerprint(
            value in arb_json(true),
            seed_a in any::<u64>(),
            seed_b in any::<u64>(),
            pretty in any::<bool>(),
        ) {
            // Both sides go through the parser so float parsing is the same
            // on each; if serde_json keeps insertion order (`preserve_order`)
            // the two parsed maps really do differ in order.
            let a: Value = serde_json::from_str(&shuffled(&value, seed_a, false)).expect("shuffled text is JSON");
            let b: Value = serde_json::from_str(&shuffled(&value, seed_b, pretty)).expect("shuffled text is JSON");
            prop_assert_eq!(canonical_json(&a), canonical_json(&b));
            prop_assert_eq!(
                request_fingerprint("POST", "/v1/orders", &a),
                request_fingerprint("POST", "/v1/orders", &b)
            );
        }

        #[test]
        fn canonical_text_is_sorted_compact_and_round_trips(value in arb_json(false)) {
            let text = canonical_json(&value);
            prop_assert!(
                serde_json::from_str::<KeysAscending>(&text).is_ok(),
                "keys out of order in {}", text
            );
            prop_assert!(!has_insignificant_whitespace(&text), "whitespace in {}", text);
            let reparsed: Value = serde_json::from_str(&text).expect("canonical text is JSON");
            prop_assert_eq!(&reparsed, &value);
            prop_assert_eq!(canonical_json(&reparsed), text);
        }

        #[test]
        fn changing_any_leaf_changes_the_fingerprint(
            value in arb_json(true),
            pick in any::<prop::sample::Index>(),
        ) {
            let mut paths = Vec::new();
            leaf_paths(&value, &mut Vec::new(), &mut paths);
            let path = pick.get(&paths);
            let mut edited = value.clone();
            let leaf = leaf_mut(&mut edited, path);
            *leaf = changed(leaf);
            prop_assert_ne!(
                request_fingerprint("PATCH", "/v1/orders/o1", &value),
                request_fingerprint("PATCH", "/v1/orders/o1", &edited)
            );
        }

        #[test]
        fn method_and_path_are_part_of_the_fingerprint(
            value in arb_json(true),
            method_a in "[A-Za-z]{1,7}",
            method_b in "[A-Za-z]{1,7}",
            path_a in "/[a-z0-9/_-]{0,24}",
            path_b in "/[a-z0-9/_-]{0,24}",
        ) {
            let fp = request_fingerprint(&method_a, &path_a, &value);
            prop_assert_eq!(&fp, &request_fingerprint(&method_a.to_lowercase(), &path_a, &value));
            if !method_a.eq_ignore_ascii_case(&method_b) {
                prop_assert_ne!(&fp, &request_fingerprint(&method_b, &path_a, &value));
            }
            if path_a != path_b {
                prop_assert_ne!(&fp, &request_fingerprint(&method_a, &path_b, &value));
            }
        }
    }
}
