//! Modules compiled into the binary: the specification's three examples, so a
//! fresh install can run something with no files of its own, an example the
//! small local model answers well (`meeting-details`, what `scripts/setup.sh`
//! runs offline), the nodes of
//! `noesis solve` (PLANNER, REASONER, REFLECTOR) and the model steps of the
//! frame plugins (`docs-node`, `review-diff`, `testgen-spec`), each
//! overridable by a module of the same name on the search path.

macro_rules! module {
    ($name:literal) => {
        (
            $name,
            &[
                ("module.yaml", include_str!(concat!("../builtin/", $name, "/module.yaml"))),
                ("prompt.md", include_str!(concat!("../builtin/", $name, "/prompt.md"))),
                ("schema.json", include_str!(concat!("../builtin/", $name, "/schema.json"))),
            ],
        )
    };
}

/// `(name, files)` of every built-in module; last in the search path.
pub static BUILTIN: &[(&str, &[(&str, &str)])] = &[
    module!("code-reviewer"),
    module!("code-simplifier"),
    module!("docs-node"),
    module!("meeting-details"),
    module!("review-diff"),
    module!("task-prioritizer"),
    module!("testgen-spec"),
    module!("workflow-planner"),
    module!("workflow-reasoner"),
    module!("workflow-reflector"),
];
