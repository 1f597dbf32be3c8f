//! The tools' definitions and their arguments, checked field by field.

use noesis_modules::ErrorCode;
use serde_json::{Map, Value, json};

use super::host::{AgentTask, ModuleCall};

/// A bad tool argument: the field, what is wrong, and the envelope code it
/// becomes when reported as a tool result.
pub(super) struct BadArgument {
    pub(super) code: ErrorCode,
    pub(super) message: String,
}

pub(super) fn known_fields(arguments: &Map<String, Value>, fields: &[&str]) -> Result<(), BadArgument> {
    match arguments.keys().find(|k| !fields.contains(&k.as_str())) {
        None => Ok(()),
        Some(unknown) => Err(BadArgument {
            code: ErrorCode::E1001,
            message: if fields.is_empty() {
                format!("unknown argument `{unknown}`: this tool takes none")
            } else {
                format!("unknown argument `{unknown}` (arguments: {})", fields.join(", "))
            },
        }),
    }
}

pub(super) fn module_name(arguments: &Map<String, Value>) -> Result<String, BadArgument> {
    match arguments.get("module") {
        Some(Value::String(s)) => Ok(s.clone()),
        None | Some(Value::Null) => Err(BadArgument {
            code: ErrorCode::E1002,
            message: "`module` is missing: a module name (the `list` tool names them)".into(),
        }),
        Some(_) => Err(BadArgument { code: ErrorCode::E1003, message: "`module` must be a string".into() }),
    }
}

const RUN_FIELDS: &[&str] = &["module", "input", "args", "provider", "model"];

pub(super) fn run_request(mut arguments: Map<String, Value>) -> Result<ModuleCall, BadArgument> {
    known_fields(&arguments, RUN_FIELDS)?;
    let module = module_name(&arguments)?;
    let input = match arguments.remove("input") {
        None | Some(Value::Null) => None,
        Some(v @ Value::Object(_)) => Some(v),
        Some(_) => {
            return Err(BadArgument { code: ErrorCode::E1001, message: "`input` must be a JSON object".into() });
        }
    };
    let mut text = |field: &'static str| match arguments.remove(field) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s)),
        Some(_) => Err(BadArgument { code: ErrorCode::E1003, message: format!("`{field}` must be a string") }),
    };
    let (args, provider, model) = (text("args")?, text("provider")?, text("model")?);
    Ok(ModuleCall { module, input, args, provider, model })
}

/// What the `agent` tool is asked: a new run, or an earlier one to follow.
pub(super) enum AgentCall {
    Start(AgentTask),
    Follow(String),
}

/// The `agent` tool's arguments: `run_id` alone, or a new run's request.
pub(super) fn agent_call(arguments: Map<String, Value>) -> Result<AgentCall, BadArgument> {
    let Some(id) = arguments.get("run_id") else {
        return agent_request(arguments).map(AgentCall::Start);
    };
    known_fields(&arguments, &["run_id"]).map_err(|b| BadArgument {
        message: format!("{} (`run_id` follows an earlier run and takes nothing else)", b.message),
        ..b
    })?;
    match id {
        Value::String(id) if !id.trim().is_empty() => Ok(AgentCall::Follow(id.clone())),
        _ => Err(BadArgument { code: ErrorCode::E1003, message: "`run_id` must be a run's id".into() }),
    }
}

/// The `agent` tool's request: a task, how calls that change anything are
/// decided (no person can be asked over MCP), the tools and a turn limit.
fn agent_request(mut arguments: Map<String, Value>) -> Result<AgentTask, BadArgument> {
    known_fields(&arguments, &["task", "approve", "tools", "max_turns"])?;
    let task = match arguments.remove("task") {
        Some(Value::String(t)) if !t.trim().is_empty() => t,
        Some(Value::String(_)) | None => {
            return Err(BadArgument {
                code: ErrorCode::E1002,
                message: "`task` is missing: what should the agent do?".into(),
            });
        }
        Some(_) => return Err(BadArgument { code: ErrorCode::E1003, message: "`task` must be a string".into() }),
    };
    let approve = match arguments.remove("approve") {
        None => "never".to_owned(),
        Some(Value::String(a)) if a == "auto" || a == "never" => a,
        Some(_) => {
            return Err(BadArgument {
                code: ErrorCode::E1003,
                message: "`approve` must be \"auto\" or \"never\": over MCP no person can be asked (POST /agents/runs can wait for one)".into(),
            });
        }
    };
    let tools = match arguments.remove("tools") {
        None => Vec::new(),
        Some(v) => serde_json::from_value(v).map_err(|_| BadArgument {
            code: ErrorCode::E1003,
            message: "`tools` must be a list of tool names".into(),
        })?,
    };
    let max_turns = match arguments.remove("max_turns") {
        None => None,
        Some(v) => Some(serde_json::from_value(v).map_err(|_| BadArgument {
            code: ErrorCode::E1003,
            message: "`max_turns` must be a whole number".into(),
        })?),
    };
    Ok(AgentTask { task, approve, tools, max_turns })
}

pub(super) fn agent_tool() -> Value {
    json!({
        "name": "agent",
        "title": "Delegate a task to an agent",
        "description": "Runs a noesis agent on a task: it reads, searches and edits the server's workspace, runs allowed commands and modules, and answers. Calls that change anything run only with approve=auto, and only when the server's operator allows it (`noesis mcp --approve auto`); otherwise they are denied and the agent is told. Returns {run_id, status, answer, outcome, usage}; with a progressToken each step is a progress notification. With run_id instead of a task it follows an earlier run (one a previous session left is resumed here).",
        "inputSchema": {
            "type": "object",
            "properties": {
                "task": {"type": "string", "description": "What the agent should do"},
                "approve": {"enum": ["auto", "never"], "description": "Whether calls that change anything may run"},
                "tools": {"type": "array", "items": {"type": "string"}, "description": "Offer only these tools"},
                "max_turns": {"type": "integer", "minimum": 1, "description": "Most model calls"},
                "run_id": {"type": "string", "description": "Instead of a task: follow this earlier run to its end, resuming it if a session that ended left it unfinished"},
            },
            "additionalProperties": false,
        },
        "annotations": {"readOnlyHint": false, "destructiveHint": true, "openWorldHint": true},
    })
}

/// The tools, as the newest revision describes them; `Mcp::tools` drops
/// what older revisions do not know.
pub(super) fn tool_definitions() -> Vec<Value> {
    let envelope = json!({
        "type": "object",
        "properties": {
            "ok": {"type": "boolean"},
            "data": {"type": "object"},
            "error": {
                "type": "object",
                "properties": {"code": {"type": "string"}, "message": {"type": "string"}},
                "required": ["code", "message"],
            },
            "meta": {"type": "object"},
        },
        "required": ["ok", "meta"],
    });
    let text = |d: &str| json!({"type": "string", "description": d});
    let run_input = json!({
        "type": "object",
        "properties": {
            "module": text("A module name (the `list` tool names them)"),
            "input": {"type": "object", "description": "The module's input, matching its input schema"},
            "args": text("Argument text for $ARGUMENTS; also the input's `query` when the module declares one and it is absent"),
            "provider": text("A provider name, instead of the server's default"),
            "model": text("A model name, instead of the provider's default"),
        },
        "required": ["module"],
        "additionalProperties": false,
    });
    vec![
        json!({
            "name": "run",
            "title": "Run a module",
            "description": "Run a Cognitive Module on an input. Returns its v2.2 envelope: {ok: true, data, meta} with the module's checked result, or {ok: false, error: {code, message}, meta}. `info` gives a module's input schema.",
            "inputSchema": run_input,
            "outputSchema": envelope,
            "annotations": {"readOnlyHint": true, "openWorldHint": true},
        }),
        json!({
            "name": "compose",
            "title": "Run a module and trace its composition",
            "description": "Like `run`, and the envelope's meta.steps lists every step the module's @call directives and composition ran: module, depth, parent step, how it came to run, timing and outcome (ok, failed, skipped with the reason, timed out, fell back).",
            "inputSchema": run_input.clone(),
            "outputSchema": envelope.clone(),
            "annotations": {"readOnlyHint": true, "openWorldHint": true},
        }),
        json!({
            "name": "list",
            "title": "List modules",
            "description": "The modules this server runs: name, version, tier, responsibility, and whether each loads.",
            "inputSchema": {"type": "object", "properties": {}, "additionalProperties": false},
            "outputSchema": {
                "type": "object",
                "properties": {
                    "modules": {
                        "type": "array",
                        "items": {
                            "type": "object",
                            "properties": {
                                "name": {"type": "string"},
                                "version": {"type": "string"},
                                "tier": {"type": "string"},
                                "responsibility": {"type": "string"},
                                "valid": {"type": "boolean"},
                            },
                            "required": ["name", "valid"],
                        },
                    },
                },
                "required": ["modules"],
            },
            "annotations": {"readOnlyHint": true, "openWorldHint": false},
        }),
        json!({
            "name": "info",
            "title": "Describe a module",
            "description": "A module's manifest, rules and schemas: input_schema is what `run` takes as `input`, data_schema what a successful run returns as `data`.",
            "inputSchema": {
                "type": "object",
                "properties": {"module": text("A module name (the `list` tool names them)")},
                "required": ["module"],
                "additionalProperties": false,
            },
            "outputSchema": {
                "type": "object",
                "properties": {
                    "name": {"type": "string"},
                    "version": {"type": "string"},
                    "responsibility": {"type": "string"},
                    "input_schema": {"type": ["object", "null"]},
                    "data_schema": {"type": ["object", "null"]},
                },
                "required": ["name", "version"],
            },
            "annotations": {"readOnlyHint": true, "openWorldHint": false},
        }),
    ]
}
