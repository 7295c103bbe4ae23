//! SigV4: verifying a signed request.
