//! The OpenAPI 3 document served at `/openapi.json`, generated from the
//! handlers' annotations and the protocol types.

use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};
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
        http::admin::list_deliveries,
        http::admin::requeue,
        http::admin::stats,
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
    modifiers(&BearerAuth)
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

pub fn document() -> utoipa::openapi::OpenApi {
    ApiDoc::openapi()
}
