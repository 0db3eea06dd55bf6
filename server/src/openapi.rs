//! The OpenAPI 3 document served at `/openapi.json`, generated from the
//! handlers' annotations and the protocol types.

use utoipa::openapi::header::Header;
use utoipa::openapi::path::{Operation, ParameterIn};
use utoipa::openapi::response::Response;
use utoipa::openapi::schema::{ObjectBuilder, Type};
use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};
use utoipa::openapi::{Content, Ref, RefOr};
use utoipa::{Modify, OpenApi};

use crate::http;

#[derive(OpenApi)]
#[openapi(
    info(title = "Holdfast sync API", version = "1", description = "See API.md: the wire contract."),
    paths(
        http::sessions::login,
        http::sessions::logout,
        http::orders::list,
        http::orders::get_one,
        http::orders::history,
        http::orders::dead_lettered,
        http::skus::list,
        http::skus::get_one,
        http::customers::list,
        http::invoices::get_one,
        http::sync::pull,
        http::sync::stream,
        http::admin::create_inbound_secret,
        http::admin::create_partner,
        http::admin::list_partners,
        http::admin::patch_partner,
        http::admin::rotate_secret,
        http::admin::delete_partner,
        http::admin::send_test_event,
        http::admin::list_deliveries,
        http::admin::requeue,
        http::admin::stats,
        http::admin_inbound::list_inbound_events,
        http::admin_inbound::list_payment_mismatches,
        http::webhooks::receive,
        http::mutations::create_order,
        http::mutations::patch_order,
        http::mutations::add_line,
        http::mutations::change_line,
        http::mutations::remove_line,
        http::mutations::allocate,
        http::mutations::release,
        http::mutations::confirm,
        http::mutations::cancel,
        http::mutations::push,
        http::ops::healthz,
        http::ops::readyz,
        http::ops::metrics,
        http::ops::openapi,
    ),
    // Only named by a query parameter, which does not collect schemas.
    components(schemas(crate::db::deliveries::DeliveryState))
)]
struct ApiDoc;

struct BearerAuth;

impl Modify for BearerAuth {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        let components = openapi.components.get_or_insert_with(Default::default);
        components.add_security_scheme(
            "bearer",
            SecurityScheme::Http(HttpBuilder::new().scheme(HttpAuthScheme::Bearer).build()),
        );
    }
}

/// Errors as they really travel. Every error is an RFC 9457 problem sent as
/// `application/problem+json` (API.md), and some refusals come from the shared
/// extractors rather than the handler, so every route that uses them can
/// answer them; they are added here rather than repeated on each route:
/// - a bearer-secured route: 401 (the `Caller` extractor);
/// - a path parameter: 404 (`ApiPath`: a malformed id names nothing);
/// - query parameters: 400 (`ApiQuery`: unknown or malformed ones);
/// - a JSON body: 400 (malformed or invalid), 413 (over 1 MiB), 415 (not JSON);
/// - every `/v1` route: 503 with Retry-After while the database is unavailable.
struct Problems;

const PROBLEM_SCHEMA: &str = "#/components/schemas/Problem";

fn problem_response(description: &str) -> RefOr<Response> {
    let mut response = Response::new(description);
    response.content.insert(
        holdfast_protocol::problem::PROBLEM_CONTENT_TYPE.to_owned(),
        Content::new(Some(Ref::new(PROBLEM_SCHEMA))),
    );
    RefOr::T(response)
}

fn is_problem(content: &Content) -> bool {
    matches!(&content.schema, Some(RefOr::Ref(r)) if r.ref_location == PROBLEM_SCHEMA)
}

fn describe_errors(op: &mut Operation, api: bool) {
    let params = op.parameters.as_deref().unwrap_or_default();
    let has = |place: ParameterIn| params.iter().any(|p| p.parameter_in == place);
    let (by_path, by_query) = (has(ParameterIn::Path), has(ParameterIn::Query));
    let secured = op.security.as_ref().is_some_and(|s| !s.is_empty());
    let json_body = op
        .request_body
        .as_ref()
        .is_some_and(|b| b.content.contains_key("application/json"));
    let mut implied = Vec::new();
    if secured {
        implied.push(("401", "`unauthorized`: no, bad or revoked bearer token"));
    }
    if by_path {
        implied.push(("404", "`not_found`: nothing with that id in your tenant"));
    }
    if by_query || json_body {
        implied.push((
            "400",
            "`malformed_json` or `validation_failed` (with `errors`)",
        ));
    }
    if json_body {
        implied.push(("413", "`payload_too_large`: the body is over 1 MiB"));
        implied.push(("415", "`unsupported_media_type`: the body is not JSON"));
    }
    let responses = &mut op.responses.responses;
    if api && !responses.contains_key("503") {
        let mut unavailable = problem_response(
            "`service_unavailable`: the database is unavailable; nothing was done, retry",
        );
        if let RefOr::T(response) = &mut unavailable {
            let seconds = ObjectBuilder::new().schema_type(Type::Integer).build();
            let mut header = Header::new(seconds);
            header.description = Some("seconds to wait before retrying".to_owned());
            response.headers.insert("Retry-After".to_owned(), header);
        }
        responses.insert("503".to_owned(), unavailable);
    }
    for (status, description) in implied {
        responses
            .entry(status.to_owned())
            .or_insert_with(|| problem_response(description));
    }
    for response in responses.values_mut() {
        let RefOr::T(response) = response else {
            continue;
        };
        if let Some(content) = response
            .content
            .get("application/json")
            .filter(|c| is_problem(c))
        {
            let content = content.clone();
            response.content.shift_remove("application/json");
            response.content.insert(
                holdfast_protocol::problem::PROBLEM_CONTENT_TYPE.to_owned(),
                content,
            );
        }
    }
}

impl Modify for Problems {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        for (path, item) in openapi.paths.paths.iter_mut() {
            let api = path.starts_with("/v1/");
            for op in [
                &mut item.get,
                &mut item.put,
                &mut item.post,
                &mut item.delete,
                &mut item.patch,
            ]
            .into_iter()
            .flatten()
            {
                describe_errors(op, api);
            }
        }
    }
}

/// The whole document: the routes above, each v1.1 master-data module's own
/// `#[derive(OpenApi)]` part merged in, then the shared security scheme and
/// problem answers applied to every operation.
pub(crate) fn document() -> utoipa::openapi::OpenApi {
    let mut doc = ApiDoc::openapi();
    // v1.1 parts: users (admin_users.rs), catalog (admin_catalog.rs),
    // customers and price lists (admin_customers.rs).
    doc.merge(http::admin_users::ApiDoc::openapi());
    doc.merge(http::admin_catalog::ApiDoc::openapi());
    doc.merge(http::admin_customers::ApiDoc::openapi());
    BearerAuth.modify(&mut doc);
    Problems.modify(&mut doc);
    doc
}

#[cfg(test)]
mod tests {
    use serde_json::Value;

    fn refs<'a>(v: &'a Value, out: &mut Vec<&'a str>) {
        match v {
            Value::Object(m) => {
                if let Some(Value::String(r)) = m.get("$ref") {
                    out.push(r);
                }
                m.values().for_each(|v| refs(v, out));
            }
            Value::Array(a) => a.iter().for_each(|v| refs(v, out)),
            _ => {}
        }
    }

    /// What schemathesis found once: path parameters left undeclared, query
    /// parameters declared as path ones, a schema referenced but missing,
    /// problems documented as `application/json`, 401 missing.
    #[test]
    fn the_document_is_consistent_with_the_routes() {
        let doc = serde_json::to_value(super::document()).expect("serialize");
        let mut all = Vec::new();
        refs(&doc, &mut all);
        for r in all {
            let name = r.strip_prefix("#/components/schemas/").expect(r);
            assert!(
                doc["components"]["schemas"][name].is_object(),
                "{r} is missing"
            );
        }
        for (path, item) in doc["paths"].as_object().expect("paths") {
            let mut template: Vec<&str> = path
                .split('/')
                .filter_map(|s| s.strip_prefix('{')?.strip_suffix('}'))
                .collect();
            template.sort_unstable();
            for (method, op) in item.as_object().expect("item") {
                let params = op["parameters"].as_array().cloned().unwrap_or_default();
                let mut declared: Vec<&str> = params
                    .iter()
                    .filter(|p| p["in"] == "path")
                    .filter_map(|p| p["name"].as_str())
                    .collect();
                declared.sort_unstable();
                assert_eq!(declared, template, "path parameters of {method} {path}");
                let responses = op["responses"].as_object().expect("responses");
                if op["security"].is_array() {
                    assert!(responses.contains_key("401"), "{method} {path} lacks 401");
                }
                for (status, response) in responses {
                    let Some(content) = response["content"].as_object() else {
                        continue;
                    };
                    let problem = content
                        .values()
                        .any(|c| c["schema"]["$ref"] == "#/components/schemas/Problem");
                    if problem {
                        assert!(
                            content.contains_key("application/problem+json")
                                && !content.contains_key("application/json"),
                            "{method} {path} {status}: problems are application/problem+json"
                        );
                    }
                }
            }
        }
    }

    /// Client generators name a function after each operationId: one used
    /// twice (utoipa's default is the handler's name, and three modules have
    /// a `list`) breaks them, and the OpenAPI validator refuses it.
    #[test]
    fn every_operation_has_its_own_operation_id() {
        let doc = serde_json::to_value(super::document()).expect("serialize");
        let mut seen = std::collections::BTreeMap::new();
        for (path, item) in doc["paths"].as_object().expect("paths") {
            for (method, op) in item.as_object().expect("item") {
                let id = op["operationId"]
                    .as_str()
                    .unwrap_or_else(|| panic!("{method} {path} has no operationId"));
                if let Some(other) = seen.insert(id.to_owned(), format!("{method} {path}")) {
                    panic!("operationId {id} names both {other} and {method} {path}");
                }
            }
        }
    }
}
