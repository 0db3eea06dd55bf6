//! The catalog's unit tests: parsing and planning, no database.

use super::plan::plan_against;
use super::*;

fn stored(code: Option<&str>, style: &str, size: &str, price: i64) -> Stored {
    Stored {
        id: Uuid::now_v7(),
        code: code.map(str::to_owned),
        style: style.into(),
        color: "Ecru".into(),
        size: size.into(),
        wholesale_price: price,
        msrp: price * 2,
        active: true,
    }
}

#[test]
fn every_bad_cell_is_named_by_line_and_column() {
    let file = b"code,style,color,size,wholesale_price,msrp\n\
        A1,Swift Tee,Ecru,M,1200,2400\n\
        A2,,Ecru,M,1200,2400\n\
        A3,Swift Tee,Ecru,L,12.00,2400\n\
        A4,Swift Tee,Ecru,XL,1200\n\
        A5,Swift Tee,Ecru,S,1200,-1\n";
    let errors = parse(file).expect_err("four bad rows");
    let fields: Vec<&str> = errors.iter().map(|e| e.field.as_str()).collect();
    assert_eq!(
        fields,
        [
            "line 3: style",
            "line 4: wholesale_price",
            "line 5: row",
            "line 6: msrp"
        ]
    );
}

#[test]
fn a_missing_or_unknown_column_is_a_header_error() {
    let errors = parse(b"code,style,colour,size,wholesale_price,msrp\n").expect_err("bad header");
    assert!(errors.iter().all(|e| e.field == "line 1: header"));
    assert!(errors.iter().any(|e| e.message.contains("`color`")));
    assert!(errors.iter().any(|e| e.message.contains("`colour`")));
}

#[test]
fn rows_match_by_code_then_by_style_colour_size() {
    let stored = vec![
        stored(Some("A1"), "Swift Tee", "M", 1200),
        stored(None, "Swift Tee", "L", 1200),
    ];
    let file = b"code,style,color,size,wholesale_price,msrp\n\
        A1,Swift Tee,Ecru,M,1300,2400\n\
        B2,Swift Tee,Ecru,L,1200,2400\n\
        C3,Swift Tee,Ecru,XL,1200,2400\n";
    let rows = parse(file).expect("valid");
    let plan = plan_against(&stored, &rows, |_| Uuid::nil()).expect("no collisions");
    assert_eq!(
        plan.summary(),
        ImportSummary {
            created: 1,
            updated: 2,
            unchanged: 0
        }
    );
    assert_eq!(plan.updates[0].1, ["wholesale_price"]);
    assert_eq!(
        plan.updates[1].1,
        ["code"],
        "a code is learned by style/colour/size"
    );
}

#[test]
fn the_same_values_again_are_unchanged() {
    let s = stored(Some("A1"), "Swift Tee", "M", 1200);
    let file =
        b"code,style,color,size,wholesale_price,msrp,active\nA1,Swift Tee,Ecru,M,1200,2400,\n";
    let rows = parse(file).expect("valid");
    let plan = plan_against(&[s], &rows, |_| Uuid::nil()).expect("plan");
    assert_eq!(
        plan.summary(),
        ImportSummary {
            created: 0,
            updated: 0,
            unchanged: 1
        }
    );
}

#[test]
fn collisions_are_named() {
    let stored = vec![
        stored(Some("A1"), "Swift Tee", "M", 1200),
        stored(Some("A2"), "Swift Tee", "L", 1200),
    ];
    let file = b"code,style,color,size,wholesale_price,msrp\n\
        A1,Swift Tee,Ecru,L,1200,2400\n\
        N1,Swift Tee,Ecru,XS,1200,2400\n\
        N1,Swift Tee,Ecru,XXL,1200,2400\n";
    let rows = parse(file).expect("valid cells");
    let errors = plan_against(&stored, &rows, |_| Uuid::nil()).expect_err("collisions");
    let fields: Vec<&str> = errors.iter().map(|e| e.field.as_str()).collect();
    assert_eq!(fields, ["line 2: style", "line 4: code"]);
    assert!(errors[0].message.contains("code A2"), "{:?}", errors[0]);
    assert!(errors[1].message.contains("line 3"), "{:?}", errors[1]);
}

#[test]
fn a_slice_keeps_file_order() {
    let file = b"code,style,color,size,wholesale_price,msrp\n\
        A1,Swift Tee,Ecru,M,1200,2400\n\
        A2,Swift Tee,Ecru,L,1200,2400\n\
        A3,Swift Tee,Ecru,XL,1200,2400\n";
    let rows = parse(file).expect("valid");
    let plan = plan_against(&[], &rows, |_| Uuid::now_v7()).expect("plan");
    let tail = plan.slice(1..3);
    assert_eq!(tail.rows(), 2);
    assert_eq!(tail.creates[0].code.as_deref(), Some("A2"));
}
