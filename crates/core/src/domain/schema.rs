//! The OpenAPI schemas of the validated inputs, next to the checks they describe, so a generated client
//! and a schema-driven fuzzer see exactly the rules the server applies: a value matches its schema if and
//! only if its check accepts it (the tests below hold each pair to that).

use utoipa::openapi::{ObjectBuilder, RefOr, Schema, schema::Type};

use super::VersionRange;

/// [`super::Name`]: a DNS-1123 label.
pub const DNS1123_LABEL: &str = "^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$";
/// [`super::check_dns1035`]: a DNS-1035 label (a Service name).
pub const DNS1035_LABEL: &str = "^[a-z]([-a-z0-9]{0,61}[a-z0-9])?$";
/// [`super::check_subdomain`]: a DNS-1123 subdomain (at most 253 characters, see [`subdomain`]).
pub const DNS1123_SUBDOMAIN: &str = "^[a-z0-9]([-a-z0-9]*[a-z0-9])?([.][a-z0-9]([-a-z0-9]*[a-z0-9])?)*$";
/// [`super::check_secret_key`]: a key of a Secret's data.
pub const SECRET_KEY: &str = "^[-._a-zA-Z0-9]{1,253}$";
/// [`super::Offload`]: `none`, `auto` or `pool:<DNS-1123 label>`.
pub const OFFLOAD: &str = "^(none|auto|pool:[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?)$";
/// [`super::check_labels`]: a label key.
pub const LABEL_KEY: &str = "^[-._/A-Za-z0-9]{1,317}$";
/// [`super::check_labels`]: a label value (may be empty).
pub const LABEL_VALUE: &str = "^[-._/A-Za-z0-9]{0,317}$";
/// Whitespace a display name may not start or end with (Unicode `White_Space` outside the controls).
const EDGE_SPACE: &str = r" \u00a0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000";
/// [`super::check_endpoint`]: `host:port`.
pub const ENDPOINT: &str = r"^([-._A-Za-z0-9]+|\[[0-9A-Fa-f:.]+\]):([1-9][0-9]{0,3}|[1-5][0-9]{4}|6[0-4][0-9]{3}|65[0-4][0-9]{2}|655[0-2][0-9]|6553[0-5])$";
/// [`super::is_idempotency_key`]: 1-255 visible ASCII characters.
pub const IDEMPOTENCY_KEY: &str = "^[!-~]{1,255}$";
/// Any `vMAJOR.MINOR.PATCH` [`super::KubeVersion`] parses.
pub const ANY_VERSION: &str = "^v(0|[1-9][0-9]{0,5})[.](0|[1-9][0-9]{0,5})[.](0|[1-9][0-9]{0,5})$";
/// A `key=value` label selector, key and value as [`LABEL_KEY`] and [`LABEL_VALUE`].
pub const LABEL_SELECTOR: &str = "^[-._/A-Za-z0-9]{1,317}=[-._/A-Za-z0-9]{0,317}$";
/// A phase name to filter by (`Ready`, `Provisioning`, …).
pub const PHASE: &str = "^[A-Za-z]{1,32}$";

/// Whether `s` has [`PHASE`]'s form.
pub fn is_phase(s: &str) -> bool {
    (1..=32).contains(&s.len()) && s.bytes().all(|b| b.is_ascii_alphabetic())
}

/// An id in its hyphenated form (`8-4-4-4-12` hex digits).
pub const UUID: &str = "^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$";

/// The id `s` names, if it has [`UUID`]'s form (not the other forms a UUID parser takes).
pub fn parse_uuid(s: &str) -> Option<uuid::Uuid> {
    let hyphens = [8, 13, 18, 23];
    let form = s.len() == 36
        && s.bytes().enumerate().all(|(i, b)| {
            if hyphens.contains(&i) {
                b == b'-'
            } else {
                b.is_ascii_hexdigit()
            }
        });
    form.then(|| uuid::Uuid::parse_str(s).ok()).flatten()
}

/// A list cursor: a position in `(createdAt, id)` order, 16 hex digits of microseconds (at most
/// `0x6fff…`, within every timestamp range on the way) and the 32 hex digits of an id.
pub const CURSOR: &str = "^[0-6][0-9a-f]{47}$";

/// Whether `s` has [`CURSOR`]'s form.
pub fn is_cursor(s: &str) -> bool {
    s.len() == 48
        && s.bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
        && s.as_bytes()[0] <= b'6'
}

/// [`super::check_display_name`]: 1-200 characters, no controls, no whitespace at either end.
pub fn display_name_pattern() -> String {
    let inner = r"[^\u0000-\u001f\u007f-\u009f]";
    let edge = format!(r"[^\u0000-\u001f\u007f-\u009f{EDGE_SPACE}]");
    format!("^{edge}({inner}{{0,198}}{edge})?$")
}

/// [`super::check_description`]: at most `max` characters, no controls.
pub fn description_pattern(max: usize) -> String {
    format!(r"^[^\u0000-\u001f\u007f-\u009f]{{0,{max}}}$")
}

/// The most labels a map may hold.
pub const MAX_LABELS: usize = 64;

fn string(pattern: &str, description: &str) -> ObjectBuilder {
    ObjectBuilder::new()
        .schema_type(Type::String)
        .pattern(Some(pattern))
        .description(Some(description))
}

/// A DNS-1123 label.
pub fn dns1123_label() -> RefOr<Schema> {
    string(DNS1123_LABEL, "A DNS-1123 label: 1-63 lowercase letters, digits or '-', starting and ending with a letter or digit.")
        .max_length(Some(63))
        .into()
}

/// A DNS-1035 label.
pub fn dns1035_label() -> RefOr<Schema> {
    string(DNS1035_LABEL, "A DNS-1035 label: 1-63 lowercase letters, digits or '-', starting with a letter and ending with a letter or digit.")
        .max_length(Some(63))
        .into()
}

/// A DNS-1123 subdomain.
pub fn subdomain() -> RefOr<Schema> {
    string(DNS1123_SUBDOMAIN, "A DNS-1123 subdomain: at most 253 lowercase letters, digits, '-' or '.', each part starting and ending with a letter or digit.")
        .max_length(Some(253))
        .into()
}

/// A key of a Secret's data.
pub fn secret_key() -> RefOr<Schema> {
    string(
        SECRET_KEY,
        "A key of the Secret's data: 1-253 letters, digits, '-', '_' or '.'.",
    )
    .into()
}

/// An events/leases offload choice.
pub fn offload() -> RefOr<Schema> {
    string(OFFLOAD, "`none`, `auto` or `pool:<name>`.").into()
}

/// A label map.
pub fn labels() -> RefOr<Schema> {
    ObjectBuilder::new()
        .schema_type(Type::Object)
        .description(Some(
            "Labels: at most 64; keys and values use letters, digits, '.', '_', '-' and '/'.",
        ))
        .max_properties(Some(MAX_LABELS))
        .property_names(Some(string(LABEL_KEY, "A label key.")))
        .additional_properties(Some(string(LABEL_VALUE, "A label value.")))
        .into()
}

impl VersionRange {
    /// The pattern of the versions [`VersionRange::check`] accepts: `vMAJOR.MINOR.PATCH` with the minor in
    /// the range (a range over several majors gets only the general form).
    pub fn pattern(&self) -> String {
        let number = "(0|[1-9][0-9]{0,5})";
        if self.min.0 != self.max.0 {
            return format!("^v{number}[.]{number}[.]{number}$");
        }
        let minors: Vec<String> = (self.min.1..=self.max.1).map(|m| m.to_string()).collect();
        format!("^v{}[.]({})[.]{number}$", self.min.0, minors.join("|"))
    }

    /// The schema of a version in the range.
    pub fn schema(&self) -> RefOr<Schema> {
        string(
            &self.pattern(),
            &format!("A Kubernetes version vMAJOR.MINOR.PATCH within the supported range {self}."),
        )
        .into()
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "tests")]

    use std::collections::BTreeMap;

    use proptest::prelude::*;

    use super::{super::*, *};

    /// Whether `value` matches `pattern`, each pattern compiled once per test thread (compiling the
    /// Unicode display-name and description patterns for each of 2,000 cases took 150 s of a loaded run).
    fn matches(pattern: &str, value: &str) -> bool {
        thread_local! {
            static COMPILED: std::cell::RefCell<std::collections::HashMap<String, regex::Regex>> =
                std::cell::RefCell::default();
        }
        COMPILED.with_borrow_mut(|compiled| {
            compiled
                .entry(pattern.to_string())
                .or_insert_with(|| regex::Regex::new(pattern).unwrap())
                .is_match(value)
        })
    }

    /// Strings near the rules: the characters that matter, at the lengths that matter.
    fn near(alphabet: &'static str, max: usize) -> impl Strategy<Value = String> {
        proptest::string::string_regex(&format!("[{alphabet}]{{0,{max}}}")).unwrap()
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(2000))]

        #[test]
        fn a_name_matches_its_pattern_exactly_when_it_parses(s in near("a-z0-9A-Z_.-", 66)) {
            prop_assert_eq!(matches(DNS1123_LABEL, &s) && s.len() <= 63, Name::parse("f", &s).is_ok(), "{:?}", s);
            prop_assert_eq!(matches(DNS1035_LABEL, &s) && s.len() <= 63, check_dns1035("f", &s).is_ok(), "{:?}", s);
        }

        #[test]
        fn a_subdomain_matches_its_pattern_exactly_when_it_passes(s in near("a-z0-9.A-", 256)) {
            prop_assert_eq!(matches(DNS1123_SUBDOMAIN, &s) && s.len() <= 253, check_subdomain("f", &s).is_ok(), "{:?}", s);
        }

        #[test]
        fn a_secret_key_matches_its_pattern_exactly_when_it_passes(s in near("a-zA-Z0-9._/ -", 255)) {
            prop_assert_eq!(matches(SECRET_KEY, &s), check_secret_key("f", &s).is_ok(), "{:?}", s);
        }

        #[test]
        fn an_offload_matches_its_pattern_exactly_when_it_parses(s in "(none|auto|pool:|pool:-|x)?[a-z0-9:-]{0,65}") {
            prop_assert_eq!(matches(OFFLOAD, &s), s.parse::<Offload>().is_ok(), "{:?}", s);
        }

        #[test]
        fn a_label_matches_its_patterns_exactly_when_it_passes(k in near("a-zA-Z0-9._/ -", 320), v in near("a-zA-Z0-9._/=-", 320)) {
            let labels = BTreeMap::from([(k.clone(), v.clone())]);
            prop_assert_eq!(matches(LABEL_KEY, &k) && matches(LABEL_VALUE, &v), check_labels("f", &labels).is_ok(), "{:?}={:?}", k, v);
        }

        #[test]
        fn a_version_matches_the_range_pattern_exactly_when_it_is_in_range(s in "v?[0-9]{0,3}[.]?[0-9]{0,8}[.]?[0-9]{0,8}") {
            let range = VersionRange::default();
            prop_assert_eq!(matches(&range.pattern(), &s), range.check("f", &s).is_ok(), "{:?}", s);
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(2000))]

        #[test]
        fn a_display_name_matches_its_pattern_exactly_when_it_passes(s in "[ a\u{a0}\u{3000}\u{1c}\u{85}\t\u{e9}]{0,3}[a-z ]{0,200}[ a\u{2028}\u{9f}\n]{0,2}") {
            prop_assert_eq!(matches(&display_name_pattern(), &s), check_display_name("f", &s).is_ok(), "{:?}", s);
        }

        #[test]
        fn a_description_matches_its_pattern_exactly_when_it_passes(s in "[a \u{7f}\u{a0}\u{e9}]{0,258}") {
            prop_assert_eq!(matches(&description_pattern(256), &s), check_description("f", &s, 256).is_ok(), "{:?}", s);
        }

        #[test]
        fn an_endpoint_matches_its_pattern_exactly_when_it_passes(s in "(\\[[0-9a-f:.]{0,6}\\]|[a-z0-9._/-]{0,8}|[a-z]+://[a-z]+)(:|::)?[0-9+]{0,6}") {
            prop_assert_eq!(matches(ENDPOINT, &s), check_endpoint("f", &s).is_ok(), "{:?}", s);
        }

        #[test]
        fn an_idempotency_key_matches_its_pattern_exactly_when_it_passes(s in "[ -~\t\u{e9}]{0,257}") {
            prop_assert_eq!(matches(IDEMPOTENCY_KEY, &s), is_idempotency_key(&s), "{:?}", s);
        }

        #[test]
        fn a_uuid_matches_its_pattern_exactly_when_it_parses(s in "([{]|urn:uuid:)?[0-9a-fA-Fg]{7,9}-?[0-9a-fA-F]{4}-[0-9a-f]{4}-?[0-9a-f]{4}-[0-9a-fG]{11,13}[}]?") {
            prop_assert_eq!(matches(UUID, &s), parse_uuid(&s).is_some(), "{:?}", s);
        }

        #[test]
        fn any_version_matches_its_pattern_exactly_when_it_parses(s in "v?[0-9]{0,8}[.]?[0-9]{0,8}[.]?[0-9]{0,8}") {
            prop_assert_eq!(matches(ANY_VERSION, &s), s.parse::<KubeVersion>().is_ok(), "{:?}", s);
        }
    }

    #[test]
    fn a_cursor_matches_its_pattern_exactly_when_it_has_its_form() {
        let ok = format!("6{}", "f".repeat(47));
        for (s, want) in [
            (ok.as_str(), true),
            ("7000000000000000aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa", false),
            ("0", false),
            ("000000000000000Aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa", false),
        ] {
            assert_eq!(is_cursor(s), want, "{s}");
            assert_eq!(matches(CURSOR, s), want, "{s}");
        }
    }

    #[test]
    fn endpoints_of_each_form_pass() {
        for ok in ["etcd-0.etcd:2379", "10.0.0.1:2379", "[::1]:2379", "db_1:65535"] {
            assert!(check_endpoint("f", ok).is_ok(), "{ok}");
        }
        for bad in [
            "http://etcd:2379",
            "etcd",
            "etcd:0",
            "etcd:65536",
            "etcd:02379",
            ":2379",
            "etcd:+1",
            "[]:1",
        ] {
            assert!(check_endpoint("f", bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn the_default_range_pattern_names_its_minors() {
        assert_eq!(
            VersionRange::default().pattern(),
            "^v1[.](30|31|32|33|34)[.](0|[1-9][0-9]{0,5})$"
        );
        for ok in ["v1.30.0", "v1.34.999999"] {
            assert!(matches(&VersionRange::default().pattern(), ok), "{ok}");
        }
        for bad in ["v1.29.9", "v1.35.0", "v1.34.01", "v1.34.1000000", "1.34.1"] {
            assert!(!matches(&VersionRange::default().pattern(), bad), "{bad}");
        }
    }

    #[test]
    fn more_than_the_maximum_labels_are_refused_as_the_schema_says() {
        let labels: BTreeMap<String, String> = (0..=MAX_LABELS)
            .map(|i| (format!("k{i}"), String::new()))
            .collect();
        assert!(check_labels("f", &labels).is_err());
        let labels: BTreeMap<String, String> = (0..MAX_LABELS)
            .map(|i| (format!("k{i}"), String::new()))
            .collect();
        assert!(check_labels("f", &labels).is_ok());
    }
}
