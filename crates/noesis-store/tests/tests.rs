//! The store's tests. One test binary, topical modules; each behaviour runs
//! on SQLite and on PostgreSQL (`NOESIS_TEST_PG`, default
//! postgres://root@127.0.0.1:5432/test; skipped with a message when it is
//! unreachable, required when `CI` is set).
#![allow(clippy::print_stderr, clippy::print_stdout, unreachable_pub)]

#[macro_use]
mod support;
mod behaviour;
mod context;
mod processes;
mod scenario;
mod tls;
