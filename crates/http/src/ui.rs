//! The web dashboard at `/ui/`: plain HTML, CSS and JavaScript embedded in the
//! binary, so a controller serves it with nothing else installed and the browser
//! loads nothing from elsewhere (the Content-Security-Policy says so too).
//!
//! The pages need no credentials: they hold no data. The script reads everything
//! through `/api/v1/` with a bearer token, which it keeps in the tab's
//! `sessionStorage`. `tranche dev` hands it one in the URL's fragment
//! (`/ui/#token=…`): a fragment never goes to the server, nor into a `Referer`, and
//! the script removes it from the address bar and the history as soon as it has read
//! it.

use std::sync::Arc;

use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::get;
use axum::Router;

use super::Api;

const INDEX: &str = include_str!("../ui/index.html");
const APP_JS: &str = include_str!("../ui/app.js");
const APP_CSS: &str = include_str!("../ui/app.css");
const ICON: &str = include_str!("../ui/icon.svg");

/// Only this origin's scripts, styles and API; no frames, no plugins, no forms
/// posting elsewhere.
const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; \
                   connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'";

pub fn router() -> Router<Arc<Api>> {
    Router::new()
        .route("/", get(|| async { Redirect::to("/ui/") }))
        .route("/ui", get(|| async { Redirect::to("/ui/") }))
        .route(
            "/ui/",
            get(|| async { asset("text/html; charset=utf-8", INDEX) }),
        )
        .route(
            "/ui/app.js",
            get(|| async { asset("text/javascript; charset=utf-8", APP_JS) }),
        )
        .route(
            "/ui/app.css",
            get(|| async { asset("text/css; charset=utf-8", APP_CSS) }),
        )
        .route(
            "/ui/icon.svg",
            get(|| async { asset("image/svg+xml", ICON) }),
        )
        .route(
            "/favicon.ico",
            get(|| async { asset("image/svg+xml", ICON) }),
        )
}

fn asset(kind: &'static str, body: &'static str) -> Response {
    let mut r = (StatusCode::OK, body).into_response();
    let h = r.headers_mut();
    h.insert(header::CONTENT_TYPE, HeaderValue::from_static(kind));
    h.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(CSP),
    );
    h.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    // Assets change with the binary; a browser checks again on each load.
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    r
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pages_load_nothing_from_elsewhere() {
        for (name, text) in [
            ("index.html", INDEX),
            ("app.js", APP_JS),
            ("app.css", APP_CSS),
        ] {
            // SVG's namespace is a name, not an address that is fetched.
            let text = text.replace("http://www.w3.org/2000/svg", "");
            for bad in [
                "http://", "https://", "//cdn", "<script>", "onclick=", "eval(",
            ] {
                assert!(!text.contains(bad), "{name} contains `{bad}`");
            }
        }
        assert!(INDEX.contains(r#"<script src="app.js""#));
    }
}
