//! Tests of noesis-code. One test binary, topical modules.

mod diff;
mod testspec;
mod units;
