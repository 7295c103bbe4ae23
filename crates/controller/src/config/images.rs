//! The image catalog of `[aws.images]`: a training image reference → a local image.
//!
//! A key is an exact reference (`<registry>/<repository>:<tag>`) or a pattern with `*`:
//! a `*` stands for one whole dot-separated label of the registry (a region:
//! `763104351884.dkr.ecr.*.amazonaws.com`), or ends the tag (`:*` any tag or digest,
//! `:2.1-*` a tag that starts with `2.1-`); the repository is always exact. An exact
//! entry wins over patterns; among matching patterns the one with the most characters
//! besides its `*`s wins, then the first by name.

/// A reference split as a pattern is: registry labels, repository, tag (a digest
/// `sha256:…` where the reference has `@`; `latest` where it has neither).
struct Parts<'a> {
    registry: Vec<&'a str>,
    repository: &'a str,
    tag: &'a str,
    digest: bool,
}

fn split(reference: &str) -> Option<Parts<'_>> {
    let (registry, rest) = reference.split_once('/')?;
    let (repository, tag, digest) = match rest.split_once('@') {
        Some((r, d)) => (r, d, true),
        None => match rest.rsplit_once(':') {
            Some((r, t)) => (r, t, false),
            None => (rest, "latest", false),
        },
    };
    Some(Parts {
        registry: registry.split('.').collect(),
        repository,
        tag,
        digest,
    })
}

/// Why `key` is not a well-formed pattern (`None`: it is one, or has no `*`).
pub fn pattern_error(key: &str) -> Option<String> {
    if !key.contains('*') {
        return None;
    }
    let rule = "a pattern is <registry>/<repository>:<tag> where a `*` stands for a whole \
                label of the registry or ends the tag, e.g. \
                763104351884.dkr.ecr.*.amazonaws.com/pytorch-training:*";
    let why = |what: &str| Some(format!("`{key}`: {what}; {rule}"));
    let Some((_, rest)) = key.split_once('/') else {
        return why("it has no `/` between the registry and the repository");
    };
    if rest.contains('@') {
        return why("a pattern names a tag, not a digest");
    }
    let Some((repository, tag)) = rest.rsplit_once(':') else {
        return why("it has no `:<tag>`");
    };
    let p = split(key).expect("it has a `/`");
    if p.registry.iter().any(|l| l.contains('*') && *l != "*") {
        return why("a `*` in the registry must be a whole label, between dots");
    }
    if repository.is_empty() || repository.contains('*') {
        return why("the repository must be given exactly, without `*`");
    }
    if tag.is_empty() || tag.find('*') != Some(tag.len() - 1) {
        return why("a `*` in the tag must be its last character, once");
    }
    None
}

/// Whether pattern `key` (well-formed) matches `reference`.
fn matches(key: &str, reference: &str) -> bool {
    let (Some(p), Some(r)) = (split(key), split(reference)) else {
        return false;
    };
    let prefix = p.tag.strip_suffix('*').unwrap_or(p.tag);
    p.registry.len() == r.registry.len()
        && p.registry
            .iter()
            .zip(&r.registry)
            .all(|(a, b)| *a == *b || (*a == "*" && !b.is_empty()))
        && p.repository == r.repository
        && if r.digest {
            p.tag == "*"
        } else {
            r.tag.starts_with(prefix)
        }
}

/// The local image `reference` runs as: its exact entry, else the most specific
/// matching pattern.
pub fn lookup<'a>(
    catalog: &'a std::collections::BTreeMap<String, String>,
    reference: &str,
) -> Option<&'a String> {
    if let Some(exact) = catalog.get(reference) {
        return Some(exact);
    }
    let literal = |k: &str| k.len() - k.matches('*').count();
    catalog
        .iter()
        .filter(|(k, _)| k.contains('*') && pattern_error(k).is_none() && matches(k, reference))
        // `min_by_key` keeps the first of equals: the most specific, then the first by name.
        .min_by_key(|(k, _)| std::cmp::Reverse(literal(k)))
        .map(|(_, v)| v)
}

#[cfg(test)]
mod tests {
    use super::*;

    const PYTORCH: &str = "763104351884.dkr.ecr.*.amazonaws.com/pytorch-training:*";

    fn catalog(entries: &[(&str, &str)]) -> std::collections::BTreeMap<String, String> {
        entries
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn patterns_match_any_region_and_tag_and_exact_entries_win() {
        let c = catalog(&[
            (PYTORCH, "/images/pytorch"),
            (
                "763104351884.dkr.ecr.*.amazonaws.com/pytorch-training:2.1-*",
                "/images/pytorch-2.1",
            ),
            (
                "763104351884.dkr.ecr.eu-west-1.amazonaws.com/pytorch-training:2.5.1-gpu-py311",
                "/images/exact",
            ),
        ]);
        let r = |s: &str| lookup(&c, s).map(String::as_str);
        assert_eq!(
            r("763104351884.dkr.ecr.us-west-2.amazonaws.com/pytorch-training:2.5.1-gpu-py311"),
            Some("/images/pytorch")
        );
        assert_eq!(
            r("763104351884.dkr.ecr.us-east-1.amazonaws.com/pytorch-training:2.1-gpu"),
            Some("/images/pytorch-2.1"),
            "the more specific pattern wins"
        );
        assert_eq!(
            r("763104351884.dkr.ecr.eu-west-1.amazonaws.com/pytorch-training:2.5.1-gpu-py311"),
            Some("/images/exact"),
            "an exact entry wins over patterns"
        );
        assert_eq!(
            r("763104351884.dkr.ecr.us-west-2.amazonaws.com/pytorch-training@sha256:abcd"),
            Some("/images/pytorch"),
            "`:*` takes a digest too"
        );
        // Another repository, account or shape of registry is not matched.
        for other in [
            "763104351884.dkr.ecr.us-west-2.amazonaws.com/pytorch-inference:2.5",
            "111111111111.dkr.ecr.us-west-2.amazonaws.com/pytorch-training:2.5",
            "763104351884.dkr.ecr.amazonaws.com/pytorch-training:2.5",
            "763104351884.dkr.ecr.us-west-2.amazonaws.com/pytorch-training/x:2.5",
        ] {
            assert_eq!(r(other), None, "{other}");
        }
    }

    #[test]
    fn malformed_patterns_are_named_with_their_rule() {
        assert_eq!(pattern_error(PYTORCH), None);
        assert_eq!(pattern_error("reg.io/exact:1"), None);
        for (key, says) in [
            ("pytorch-training:*", "no `/`"),
            ("763104351884.dkr.ecr.us-*.amazonaws.com/p:*", "whole label"),
            ("reg.io/pytorch-*:1", "repository must be given exactly"),
            ("reg.io/*:1", "repository must be given exactly"),
            ("reg.io/p:*-gpu", "last character"),
            ("reg.io/p:**", "last character"),
            ("*.io/p", "no `:<tag>`"),
            ("reg.io/p@sha256:*", "not a digest"),
        ] {
            let e = pattern_error(key).unwrap_or_else(|| panic!("{key} is refused"));
            assert!(
                e.contains(&format!("`{key}`")) && e.contains(says),
                "{key}: {e}"
            );
        }
        // A malformed pattern matches nothing.
        let c = catalog(&[("reg.io/p:*-gpu", "/x")]);
        assert_eq!(lookup(&c, "reg.io/p:a-gpu"), None);
    }
}
