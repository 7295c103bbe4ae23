//! The controller with its adapters: the replicated service, and over it the HTTPS API
//! with the AWS endpoint's routes merged in, on `http_addr` where it is set.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;
use tranche_controller::mailbox::NodeError;
use tranche_controller::Config;

/// Why a controller with its adapters could not start, or stopped.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// The HTTPS API's port (`http_addr`).
    #[error("{0}")]
    Http(String),
    /// The HTTPS API's TLS setup.
    #[error(transparent)]
    Https(tranche_tls::TlsError),
    /// The controller itself.
    #[error(transparent)]
    Controller(#[from] NodeError),
}

/// Runs a controller with its adapters until `shutdown` turns true (or the node fails).
pub async fn run(cfg: Config, shutdown: watch::Receiver<bool>) -> Result<(), RunError> {
    // The HTTPS port is bound before the controller joins its peers, so a taken port is
    // an error at start.
    let listener = match &cfg.http_addr {
        Some(addr) => Some(tranche_http::bind(addr).map_err(RunError::Http)?),
        None => None,
    };
    let controller = tranche_controller::server::open(cfg.clone())?;
    if let Some(listener) = listener {
        let tls = tranche_tls::https_server_config(&controller.files, controller.certs.clone())
            .map_err(RunError::Https)?;
        let api = tranche_http::Api::new(
            controller.service.clone(),
            controller.shared.clone(),
            controller.certs.clone(),
            controller.files.clone(),
            controller.client_addr,
        );
        // The AWS Batch-compatible endpoint serves where the cluster's key secret is set.
        let aws = controller.service.key_secret().map(|k| {
            Arc::new(tranche_aws::Endpoint::new(
                cfg.aws.clone(),
                k.as_bytes().to_vec(),
                Duration::from_secs(cfg.http.body_timeout_s),
            ))
        });
        // S3, on the same port, where `[aws] s3_dir` is set too.
        let s3 = match (controller.service.key_secret(), &cfg.aws.s3_dir) {
            (Some(k), Some(dir)) => Some(
                tranche_aws::s3::service(api.clone(), k.as_bytes().to_vec(), dir)
                    .map_err(|e| RunError::Http(format!("[aws] s3_dir {}: {e}", dir.display())))?,
            ),
            _ => None,
        };
        let app = tranche_aws::s3::divert(tranche_http::router(api, tranche_aws::router(aws)), s3);
        tokio::spawn(tranche_http::serve(
            listener,
            tls,
            controller.certs.clone(),
            app,
            cfg.http.clone(),
            shutdown.clone(),
        ));
    }
    Ok(controller.run(shutdown).await?)
}
