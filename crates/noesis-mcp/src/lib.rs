//! The Model Context Protocol, both ways.
//!
//! [`client`]: MCP servers as agent tools — each configured server started
//! or reached through the official SDK (`rmcp`), its tools offered to a run
//! as a [`noesis_agent::ToolSource`]. Its API is also at the crate root,
//! where the CLI and the agent host name it.
//!
//! [`server`]: noesis as an MCP server (`noesis mcp`) — Cognitive Modules
//! as tools, resources and prompts, agent runs as the `agent` tool — over a
//! line transport, through the [`server::Modules`] and [`server::Agents`]
//! traits the embedding program implements. It is hand-written JSON-RPC,
//! not `rmcp`'s server: see `server`'s documentation for what `rmcp` does
//! not express.

pub mod client;
pub mod server;

pub use client::{
    Answers, CALL_TIMEOUT, CONNECT_TIMEOUT, Confine, Elicitation, Elicited, Elicitor, McpError, McpRun, McpServers,
    RouterSampler, SAMPLING_ROLE, Sampled, Sampler, ServerSpec, Transport, check_server_name, prefixed, split_prefixed,
};
