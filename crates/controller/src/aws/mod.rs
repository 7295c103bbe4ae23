//! The AWS Batch-compatible endpoint: AWS Batch's quota-management and service-job
//! operations (rest-json, `POST /v1/<operation>`), signed with SigV4 by access keys
//! that `tranche keys issue` makes, on the controllers' HTTPS listener.

pub mod keys;
pub mod sigv4;
