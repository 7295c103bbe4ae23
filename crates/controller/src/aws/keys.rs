//! Access keys: ids, and the secrets derived from them and the cluster key secret.
