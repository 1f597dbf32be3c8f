//! End-to-end tests of the `noesis` binary. One test binary, topical modules.

mod agent;
mod attacks;
mod bad_input;
mod browser;
mod budgets;
mod cli;
mod compose;
mod conformance;
mod context;
mod dashboard;
mod frames;
mod install;
#[cfg(feature = "local")]
mod local;
mod mcp;
mod migrate;
mod module_test;
mod parallel;
mod plugins;
mod providers;
mod run;
#[cfg(feature = "temporal")]
mod scale_out;
mod serve;
mod sharing;
mod skills;
mod snapshots;
mod solve;
mod state;
mod support;
mod traces;
