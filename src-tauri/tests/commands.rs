//! The shell's commands over Tauri's mock runtime (no display): the names,
//! argument keys and error shape the UI's backend.ts relies on.

use holdfast_client::token::MemoryTokens;
use holdfast_client::{Engine, SyncConfig};
use serde_json::{json, Value};
use tauri::test::{get_ipc_response, mock_builder, mock_context, noop_assets, INVOKE_KEY};
use tauri::webview::InvokeRequest;
use tauri::WebviewWindowBuilder;

fn invoke(
    w: &tauri::WebviewWindow<tauri::test::MockRuntime>,
    cmd: &str,
    args: Value,
) -> Result<Value, Value> {
    get_ipc_response(
        w,
        InvokeRequest {
            cmd: cmd.into(),
            callback: tauri::ipc::CallbackFn(0),
            error: tauri::ipc::CallbackFn(1),
            url: "tauri://localhost".parse().expect("url"),
            body: tauri::ipc::InvokeBody::Json(args),
            headers: Default::default(),
            invoke_key: INVOKE_KEY.to_string(),
        },
    )
    .map(|b| b.deserialize::<Value>().expect("json"))
}

#[test]
fn commands_forward_to_the_engine() {
    let dir = tempfile::tempdir().expect("tempdir");
    let engine = Engine::open(
        &dir.path().join("s.db"),
        std::sync::Arc::new(MemoryTokens::default()),
        SyncConfig::default(),
    )
    .expect("engine");
    let app = mock_builder()
        .invoke_handler(holdfast_desktop::commands::handler())
        .setup(move |app| {
            holdfast_desktop::setup(app, engine);
            Ok(())
        })
        .build(mock_context(noop_assets()))
        .expect("app");
    let w = WebviewWindowBuilder::new(&app, "main", Default::default())
        .build()
        .expect("window");

    assert_eq!(invoke(&w, "get_profile", json!({})), Ok(Value::Null));
    assert_eq!(invoke(&w, "list_orders", json!({})), Ok(json!([])));
    let status = invoke(&w, "get_status", json!({})).expect("status");
    assert_eq!(status["pending"], json!(0));
    // camelCase keys in, the engine's error out as {kind, message}.
    let err = invoke(
        &w,
        "get_order",
        json!({"orderId": "0190b5a0-0000-7000-8000-000000000000"}),
    );
    assert_eq!(err, Ok(Value::Null));
    let err = invoke(
        &w,
        "allocate",
        json!({"orderId": "0190b5a0-0000-7000-8000-000000000000", "lineId": "0190b5a0-0000-7000-8000-000000000001", "qty": 1}),
    )
    .expect_err("not signed in, no such order");
    assert!(err["kind"].is_string(), "{err}");
    assert!(err["message"].is_string(), "{err}");
}
