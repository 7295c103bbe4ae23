//! The OpenAPI 3.1 document of the API, generated from the handlers' annotations and
//! the types in [`super::dto`].

use std::sync::OnceLock;

use axum::http::{header, HeaderValue};
use axum::response::{IntoResponse, Response};
use utoipa::openapi::security::{Http, HttpAuthScheme, SecurityRequirement, SecurityScheme};
use utoipa::{Modify, OpenApi};

use super::dto::*;
use super::error::{ErrorBody, ErrorDetail};
use super::history::{EndedJobView, HistoryPageView};
use super::{history, logs, routes, stream};

struct Security;

impl Modify for Security {
    fn modify(&self, doc: &mut utoipa::openapi::OpenApi) {
        let c = doc.components.get_or_insert_with(Default::default);
        c.add_security_scheme(
            "bearer",
            SecurityScheme::Http(
                Http::builder()
                    .scheme(HttpAuthScheme::Bearer)
                    .description(Some(
                        "A token from `tranche token issue`: the issuing certificate's identity, until it expires",
                    ))
                    .build(),
            ),
        );
        c.add_security_scheme(
            "mutualTLS",
            SecurityScheme::MutualTls {
                description: Some(
                    "A client certificate issued by the cluster CA (`tranche certs issue`)".into(),
                ),
                extensions: None,
            },
        );
        doc.security = Some(vec![
            SecurityRequirement::new("bearer", Vec::<String>::new()),
            SecurityRequirement::new("mutualTLS", Vec::<String>::new()),
        ]);
    }
}

#[derive(OpenApi)]
#[openapi(
    info(
        title = "Tranche API",
        version = "1",
        description = "The HTTPS + JSON API of a Tranche cluster's controllers: jobs, quota shares, the queue, nodes, controllers, policy, and a server-sent event stream. Any controller answers; writes go to the leader. Errors are `{\"error\": {\"code\", \"message\", \"field\"?}}`."
    ),
    paths(
        routes::health, routes::whoami,
        routes::list_jobs, routes::submit, routes::get_job, routes::update_job,
        routes::cancel_job, routes::hold_job, routes::release_job, routes::explain_job, logs::logs,
        history::history,
        routes::shares, routes::groups, routes::delete_group, routes::queue, routes::nodes, routes::drain, routes::resume,
        routes::controllers, routes::apply_policy, stream::events,
    ),
    components(schemas(
        ErrorBody, ErrorDetail, Status, SubmitJob, CheckpointSpec, Submitted, JobUpdate,
        CancelJob, DrainNode, ApplyPolicy, PolicyChange, PolicyResult, JobSummaryView,
        JobPage, JobSpecView, NodeAllocView, AttemptEndView, AttemptView, TransitionView,
        StopView, JobView, ArrayTaskView, ExplanationView, UnitUsageView, ShareView, FairView, GroupView, GroupUnitView, ShareFront, QueueView,
        GpuView, NodeView, MemberView, ControllersView, Health, WhoAmI, JobEventView,
        UnitUseView, ShareEventView, routes::Done, EndedJobView, HistoryPageView,
    )),
    modifiers(&Security),
    tags(
        (name = "jobs", description = "Submit, list, inspect, change and cancel jobs; their output"),
        (name = "cluster", description = "Shares, the queue, controllers, policy"),
        (name = "nodes", description = "Nodes, drain and resume"),
        (name = "events", description = "Job transitions and share usage as server-sent events"),
    )
)]
pub struct ApiDoc;

/// The document as JSON text (made once).
pub fn json() -> &'static str {
    static DOC: OnceLock<String> = OnceLock::new();
    DOC.get_or_init(|| {
        let mut doc = ApiDoc::openapi();
        doc.merge(super::dash::DashDoc::openapi());
        doc.to_pretty_json().expect("the document encodes")
    })
}

/// `GET /api/v1/openapi.json` (no credentials needed).
pub async fn document() -> Response {
    let mut r = json().to_string().into_response();
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    r
}
