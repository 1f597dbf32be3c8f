//! Modules compiled into the binary: the specification's three examples, so a
//! fresh install can run something with no files of its own, and the nodes
//! of `noesis solve` (PLANNER, REASONER, REFLECTOR), overridable by a module
//! of the same name on the search path.

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
    module!("task-prioritizer"),
    module!("workflow-planner"),
    module!("workflow-reasoner"),
    module!("workflow-reflector"),
];
