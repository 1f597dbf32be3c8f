//! Advisory manifest fields (`ADVISORY_FIELDS`): a value the runtime does
//! not act on loads with a warning whatever it is; a field the runtime acts
//! on stays strict.

use std::path::{Path, PathBuf};

use noesis_modules::{ADVISORY_FIELDS, LoadError, load_dir};

fn fixture() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/ui-component-generator")
}

/// The fixture with its module.yaml edited by `edit`, in a temp dir.
fn edited(edit: impl Fn(&str) -> String) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    for f in ["module.yaml", "prompt.md", "schema.json"] {
        let text = std::fs::read_to_string(fixture().join(f)).unwrap();
        let text = if f == "module.yaml" { edit(&text) } else { text };
        std::fs::write(dir.path().join(f), text).unwrap();
    }
    dir
}

#[test]
fn an_unknown_preferred_capability_loads_with_a_warning() {
    let m = load_dir(&fixture()).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(m.name, "ui-component-generator");
    assert_eq!(
        m.manifest.runtime_requirements.as_ref().unwrap().preferred_capabilities,
        ["code_generation", "json_mode"]
    );
    assert_eq!(m.warnings.len(), 1, "{:?}", m.warnings);
    let w = &m.warnings[0];
    assert!(w.contains("module.yaml"), "{w}");
    assert!(w.contains("/runtime_requirements/preferred_capabilities/0"), "{w}");
    assert!(w.contains("code_generation"), "{w}");
    assert!(w.contains("advisory"), "{w}");
}

#[test]
fn a_valid_capability_list_has_no_warning() {
    let dir = edited(|t| t.replace("    - code_generation\n", ""));
    let m = load_dir(dir.path()).unwrap_or_else(|e| panic!("{e}"));
    assert!(m.warnings.is_empty(), "{:?}", m.warnings);
}

#[test]
fn an_advisory_field_of_another_shape_loads_with_a_warning() {
    for (from, to, kept) in [
        // A lone string instead of a list.
        (
            "  preferred_capabilities:\n    - code_generation\n    - json_mode\n",
            "  preferred_capabilities: code_generation\n",
            vec!["code_generation"],
        ),
        // An item that is not a string.
        ("    - code_generation\n", "    - {name: code_generation}\n", vec!["json_mode"]),
        // A map instead of a list.
        (
            "  preferred_capabilities:\n    - code_generation\n    - json_mode\n",
            "  preferred_capabilities: {fast: true}\n",
            vec![],
        ),
    ] {
        let dir = edited(|t| t.replace(from, to));
        let m = load_dir(dir.path()).unwrap_or_else(|e| panic!("{to}: {e}"));
        assert_eq!(m.manifest.runtime_requirements.as_ref().unwrap().preferred_capabilities, kept, "{to}");
        assert!(
            m.warnings.iter().any(|w| w.contains("/runtime_requirements/preferred_capabilities")),
            "{to}: {:?}",
            m.warnings
        );
    }
}

#[test]
fn the_failure_contract_is_advisory() {
    assert!(ADVISORY_FIELDS.contains(&"/failure/contract"));
    for (to, kept) in [("  contract: exceptions\n", Some("exceptions")), ("  contract: [1, 2]\n", None)] {
        let dir = edited(|t| t.replace("  contract: error_union\n", to));
        let m = load_dir(dir.path()).unwrap_or_else(|e| panic!("{to}: {e}"));
        assert_eq!(m.manifest.failure.as_ref().unwrap().contract.as_deref(), kept, "{to}");
        assert!(m.warnings.iter().any(|w| w.contains("/failure/contract")), "{to}: {:?}", m.warnings);
    }
}

#[test]
fn fields_the_runtime_acts_on_stay_strict() {
    for (from, to, field) in [
        ("tier: decision", "tier: boss", "/tier"),
        ("  network: deny", "  network: sometimes", "/policies/network"),
        ("  max_input_tokens: 8000", "  max_input_tokens: lots", "/runtime_requirements/max_input_tokens"),
        ("  structured_output: true", "  structured_output: maybe", "/runtime_requirements/structured_output"),
        ("  partial_allowed: true", "  partial_allowed: sometimes", "/failure/partial_allowed"),
        ("runtime_requirements:\n", "runtime_requirements: fast\nunused:\n", "/runtime_requirements"),
    ] {
        let dir = edited(|t| {
            assert!(t.contains(from), "{from}");
            t.replace(from, to)
        });
        match load_dir(dir.path()) {
            Err(LoadError::Manifest { violations, .. }) => {
                assert!(violations.iter().any(|v| v.pointer == field), "{to}: {violations:?}");
                // The advisory warning is not what refuses it.
                assert!(
                    violations.iter().all(|v| !v.pointer.starts_with("/runtime_requirements/preferred_capabilities")),
                    "{to}: {violations:?}"
                );
            }
            other => panic!("{to}: expected a manifest error, got {other:?}"),
        }
    }
}
