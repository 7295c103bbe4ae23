//! A daemon's TOML config file: read, parsed into the daemon's own type, and the one
//! error shape that names the file (and the field, where a rule is broken).

use std::path::Path;

/// A config file that could not be used; the message names the file and the field.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read {path}: {err}")]
    Read { path: String, err: std::io::Error },
    #[error("{path}: {err}")]
    Parse { path: String, err: String },
    #[error("{path}: field `{field}`: {rule}")]
    Invalid {
        path: String,
        field: &'static str,
        rule: String,
    },
}

/// The text of the config file at `path`.
pub fn read(path: &Path) -> Result<String, ConfigError> {
    std::fs::read_to_string(path).map_err(|err| ConfigError::Read {
        path: path.display().to_string(),
        err,
    })
}

/// `text` (the file `path`) parsed as `T`; unknown fields are refused where `T` says so.
pub fn parse<T: serde::de::DeserializeOwned>(text: &str, path: &str) -> Result<T, ConfigError> {
    toml::from_str(text).map_err(|e| ConfigError::Parse {
        path: path.to_string(),
        err: e.to_string(),
    })
}

#[cfg(test)]
mod tests {
    #[derive(serde::Deserialize, Debug)]
    #[serde(deny_unknown_fields)]
    struct T {
        #[allow(dead_code)]
        a: u32,
    }

    #[test]
    fn errors_name_the_file() {
        let e = super::read(std::path::Path::new("/nonexistent/x.toml")).unwrap_err();
        assert!(
            e.to_string()
                .starts_with("cannot read /nonexistent/x.toml: "),
            "{e}"
        );
        let e = super::parse::<T>("b = 1", "c.toml").unwrap_err();
        assert!(e.to_string().starts_with("c.toml: "), "{e}");
        assert!(super::parse::<T>("a = 1", "c.toml").is_ok());
    }
}
