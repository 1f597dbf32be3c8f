//! The engine: a GGUF model run by llama.cpp (through `llama-cpp-2`),
//! decoding one token at a time under an optional [`Constraint`].
//!
//! The engine knows tokens and logits; it does not know JSON or schemas. It
//! asks the constraint which tokens may come next, picks one from the
//! model's logits among those, and appends tokens the constraint forces
//! (fast-forward) in one batch without sampling them.

use std::num::NonZeroU32;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use llama_cpp_2::context::params::LlamaContextParams;
use llama_cpp_2::context::session::{LlamaStateSeqFlags, SeqState};
use llama_cpp_2::llama_backend::LlamaBackend;
use llama_cpp_2::llama_batch::LlamaBatch;
use llama_cpp_2::model::params::LlamaModelParams;
use llama_cpp_2::model::{LlamaChatMessage, LlamaChatTemplate, LlamaModel};
use llama_cpp_2::token::LlamaToken;
use noesis_llm::Message;
use toktrie::{TokEnv, TokTrie, TokenId, TokenizerEnv};

use crate::constraint::{Constraint, is_allowed};
use crate::error::Error;
use crate::gguf::{self, GgufInfo};

/// How the engine runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EngineOptions {
    /// CPU threads for prefill and decode.
    pub threads: u32,
    /// Append grammar-forced tokens without sampling them.
    pub fast_forward: bool,
    /// Keep the evaluated state of the last generation and prefill only
    /// what a new prompt adds after the part it shares with it.
    pub reuse_prefix: bool,
}

impl Default for EngineOptions {
    fn default() -> EngineOptions {
        EngineOptions { threads: 2, fast_forward: true, reuse_prefix: true }
    }
}

/// Contexts are made in sizes of this many tokens, so that the prompts of
/// one conversation, growing turn by turn, mostly land in a context of the
/// same size — the size a kept state can be restored into.
const CONTEXT_STEP: u32 = 2048;

/// States kept at most: one per conversation going on at once (agent runs
/// side by side, a sub-agent and its parent), the least recently used
/// dropped first. Each holds only the tokens evaluated (tens of MB for
/// a 135M model at a few thousand tokens).
const KEPT_STATES: usize = 4;

/// What a generation evaluated, kept for the next: an agent's next turn
/// sends the whole conversation again, and only its end is new.
struct Kept {
    /// The size of the context it was evaluated in.
    n_ctx: u32,
    /// Every token whose keys and values the state holds, in order.
    tokens: Vec<LlamaToken>,
    state: SeqState,
}

/// Why generation stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Finish {
    /// The model ended, or the grammar was complete.
    Stop,
    /// The token budget ran out.
    Length,
}

/// Where the time of one generation went.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Timings {
    /// Setting up the context for this request.
    pub setup: Duration,
    /// Evaluating the prompt.
    pub prefill: Duration,
    /// Evaluating generated tokens (llama.cpp's decode calls after the prompt).
    pub decode: Duration,
    /// Computing masks, forced tokens and advancing the constraint.
    pub constraint: Duration,
    /// Picking tokens from the logits.
    pub sample: Duration,
    /// The whole generation after the prompt (decode + constraint + sample
    /// + detokenising).
    pub generate: Duration,
    /// Keeping the evaluated state for the next generation.
    pub keep: Duration,
}

/// One finished generation.
#[derive(Debug, Clone, PartialEq)]
pub struct Generation {
    /// The text produced.
    pub text: String,
    /// Why it stopped.
    pub finish: Finish,
    /// Prompt tokens.
    pub prompt_tokens: u32,
    /// Of those, tokens the last generation had evaluated already (not
    /// prefilled again).
    pub reused_tokens: u32,
    /// Tokens produced (forced ones included).
    pub output_tokens: u32,
    /// Of those, tokens the grammar forced (appended without sampling).
    pub forced_tokens: u32,
    /// Steps where the model's logits were sampled.
    pub sampled_tokens: u32,
    /// llama.cpp decode calls after the prompt (one per sampled token, one
    /// per batch of forced tokens).
    pub decode_calls: u32,
    /// Where the time went.
    pub timings: Timings,
}

/// One generation request.
pub struct Request<'a> {
    /// The prompt, already in the model's chat format.
    pub prompt: &'a str,
    /// Most tokens to produce.
    pub max_tokens: u32,
    /// What may be produced; `None` for free text.
    pub constraint: Option<Box<dyn Constraint>>,
    /// Sampling temperature; `None` or `0` picks the most likely token.
    pub temperature: Option<f32>,
    /// Seed for sampling at a temperature.
    pub seed: u64,
    /// Set to stop early.
    pub cancel: &'a AtomicBool,
    /// Receives the text as it is produced.
    pub on_text: &'a mut dyn FnMut(&str),
}

impl std::fmt::Debug for Request<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Request")
            .field("prompt", &self.prompt)
            .field("max_tokens", &self.max_tokens)
            .field("constrained", &self.constraint.is_some())
            .finish_non_exhaustive()
    }
}

fn backend() -> Result<&'static LlamaBackend, Error> {
    static BACKEND: OnceLock<Result<LlamaBackend, String>> = OnceLock::new();
    BACKEND
        .get_or_init(|| {
            let mut b = LlamaBackend::init().map_err(|e| e.to_string())?;
            // llama.cpp logs every load to stderr; errors reach the caller
            // as values instead.
            b.void_logs();
            Ok(b)
        })
        .as_ref()
        .map_err(|e| Error::Engine(e.clone()))
}

/// A loaded model. Generation is serialised: one at a time per model.
pub struct Engine {
    model: Arc<LlamaModel>,
    path: PathBuf,
    info: GgufInfo,
    template: LlamaChatTemplate,
    options: EngineOptions,
    /// One generation at a time; holds what the latest ones evaluated,
    /// the most recent last.
    lock: Mutex<Vec<Kept>>,
}

impl std::fmt::Debug for Engine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Engine").field("path", &self.path).field("info", &self.info).finish_non_exhaustive()
    }
}

impl Engine {
    /// Loads the GGUF model at `path` (memory-mapped), after checking the
    /// file so a bad one is reported by what is wrong with it.
    pub fn load(path: &Path, options: EngineOptions) -> Result<Engine, Error> {
        if !path.is_file() {
            return Err(Error::Missing { path: path.to_owned() });
        }
        let info = gguf::inspect(path).map_err(|source| Error::BadFile { path: path.to_owned(), source })?;
        let backend = backend()?;
        let model = LlamaModel::load_from_file(backend, path, &LlamaModelParams::default()).map_err(|_| {
            Error::Unsupported {
                path: path.to_owned(),
                architecture: info.architecture.clone().unwrap_or_else(|| "?".into()),
            }
        })?;
        // Models without a template get ChatML, the most common format.
        let template = match model.chat_template(None) {
            Ok(t) => t,
            Err(_) => LlamaChatTemplate::new("chatml").map_err(|e| Error::Engine(e.to_string()))?,
        };
        Ok(Engine {
            model: Arc::new(model),
            path: path.to_owned(),
            info,
            template,
            options,
            lock: Mutex::new(Vec::new()),
        })
    }

    /// The model file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// What the file's header says.
    pub fn info(&self) -> &GgufInfo {
        &self.info
    }

    /// The context size the model was trained for.
    pub fn context_size(&self) -> u32 {
        self.model.n_ctx_train()
    }

    /// The vocabulary as the constraint layer needs it, with the model's own
    /// tokenizer (so grammar-forced text is tokenised as the model would,
    /// which fast-forward needs). Walks every token: build once per model.
    pub fn tok_env(&self) -> TokEnv {
        let approximate = llama_cpp_2::sampling::LlamaSampler::llguidance_tok_env(&self.model);
        Arc::new(LlamaTokEnv { trie: approximate.tok_trie().clone(), model: self.model.clone() })
    }

    /// `messages` in the model's chat format, ending where the assistant's
    /// reply starts.
    pub fn format(&self, messages: &[Message]) -> Result<String, Error> {
        let template_err = |message: String| Error::Template { path: self.path.clone(), message };
        let chat = chat_turns(messages)
            .into_iter()
            .map(|(role, content)| LlamaChatMessage::new(role.to_owned(), content))
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| template_err(e.to_string()))?;
        self.model.apply_chat_template(&self.template, &chat, true).map_err(|e| template_err(e.to_string()))
    }

    /// Tokens of `text` (special tokens parsed, BOS added when the model
    /// wants one).
    pub fn tokenize(&self, text: &str) -> Vec<u32> {
        self.model.vocab().tokenize(text.as_bytes(), true, true).into_iter().map(|t| t.0.cast_unsigned()).collect()
    }

    /// Runs one generation. Blocks: call it from a blocking thread.
    pub fn generate(&self, mut req: Request<'_>) -> Result<Generation, Error> {
        let mut kept_states = self.lock.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let started = Instant::now();
        let prompt: Vec<LlamaToken> =
            self.tokenize(req.prompt).into_iter().map(|t| LlamaToken(t.cast_signed())).collect();
        let prompt_tokens = u32::try_from(prompt.len()).unwrap_or(u32::MAX);
        let trained = self.context_size();
        if prompt.is_empty() {
            return Err(Error::Engine("the prompt is empty".into()));
        }
        if prompt_tokens >= trained {
            return Err(Error::ContextOverflow { tokens: prompt_tokens, context: trained });
        }
        let max_tokens = req.max_tokens.min(trained - prompt_tokens);
        let n_ctx = (prompt_tokens + max_tokens + 1).div_ceil(CONTEXT_STEP).saturating_mul(CONTEXT_STEP).min(trained);
        // The shared start, less one token: the last prompt token is
        // always evaluated here, for the logits of the first reply token.
        let shared = |k: &Kept| {
            if k.n_ctx == n_ctx {
                k.tokens.iter().zip(&prompt).take_while(|(a, b)| a == b).count().min(prompt.len() - 1)
            } else {
                0
            }
        };
        // The state that shares the longest start is restored from; it
        // stays kept (another conversation may share only a token or two).
        let kept = (0..kept_states.len())
            .filter(|_| self.options.reuse_prefix)
            .filter(|i| shared(&kept_states[*i]) > 0)
            .max_by_key(|i| shared(&kept_states[*i]));
        let mut reused = kept.map_or(0, |i| shared(&kept_states[i]));
        let fresh = u32::try_from(prompt.len() - reused).unwrap_or(u32::MAX);
        let n_batch = fresh.clamp(64, 512);
        let threads = i32::try_from(self.options.threads.max(1)).unwrap_or(2);
        let params = LlamaContextParams::default()
            .with_n_ctx(NonZeroU32::new(n_ctx))
            .with_n_batch(n_batch)
            .with_n_ubatch(n_batch)
            .with_n_threads(threads)
            .with_n_threads_batch(threads);
        let mut ctx = self.model.new_context(backend()?, params).map_err(|e| Error::Engine(e.to_string()))?;
        if let Some(k) = kept.filter(|_| reused > 0).map(|i| &kept_states[i]) {
            let restored = ctx.state_seq_set(&k.state, 0).is_ok()
                && ctx.clear_kv_cache_seq(Some(0), u32::try_from(reused).ok(), None).unwrap_or(false);
            if !restored {
                ctx.clear_kv_cache();
                reused = 0;
            }
        }
        let mut batch = LlamaBatch::new(n_batch as usize, 1);
        let mut timings = Timings { setup: started.elapsed(), ..Timings::default() };
        // Every token evaluated in this context, to keep for the next.
        let mut evaluated: Vec<LlamaToken> = prompt.clone();

        // Prefill, in chunks of n_batch; logits for the last token only.
        let t = Instant::now();
        let mut pos = i32::try_from(reused).unwrap_or(0);
        for chunk in prompt[reused..].chunks(n_batch as usize) {
            batch.clear();
            for tok in chunk {
                let last = pos + 1 == i32::try_from(prompt.len()).unwrap_or(i32::MAX);
                batch.add(*tok, pos, &[0], last).map_err(|e| Error::Engine(e.to_string()))?;
                pos += 1;
            }
            ctx.decode(&mut batch).map_err(|e| Error::Engine(e.to_string()))?;
        }
        timings.prefill = t.elapsed();

        let generating = Instant::now();
        let vocab = self.model.vocab();
        let mut logits_at = batch.n_tokens() - 1;
        let mut text = Detokenizer::default();
        let mut out = String::new();
        let mut emit = |s: &str, out: &mut String| {
            if !s.is_empty() {
                out.push_str(s);
                (req.on_text)(s);
            }
        };
        let (mut produced, mut forced_n, mut sampled_n, mut calls) = (0u32, 0u32, 0u32, 0u32);
        let mut rng = req.seed | 1;
        let temperature = req.temperature.filter(|t| *t > 0.0);
        let finish = loop {
            if req.cancel.load(Ordering::Relaxed) {
                return Err(Error::Cancelled);
            }
            if produced >= max_tokens {
                break Finish::Length;
            }
            let mut next: Vec<u32> = Vec::new();
            if let Some(c) = req.constraint.as_mut() {
                let t = Instant::now();
                if c.is_done() {
                    timings.constraint += t.elapsed();
                    break Finish::Stop;
                }
                if self.options.fast_forward {
                    next = c.forced();
                    next.truncate((max_tokens - produced) as usize);
                    if !next.is_empty() {
                        c.commit(&next)?;
                    }
                }
                timings.constraint += t.elapsed();
            }
            if next.is_empty() {
                let logits = ctx.get_logits_ith(logits_at);
                let picked = match req.constraint.as_mut() {
                    Some(c) => {
                        let t = Instant::now();
                        let mask = c.allowed()?;
                        timings.constraint += t.elapsed();
                        let t = Instant::now();
                        let p = pick(logits, Some(mask), temperature, &mut rng);
                        timings.sample += t.elapsed();
                        p
                    }
                    None => {
                        let t = Instant::now();
                        let p = pick(logits, None, temperature, &mut rng);
                        timings.sample += t.elapsed();
                        p
                    }
                };
                let Some(tok) = picked else {
                    return Err(Error::Engine("the grammar allows no token here".into()));
                };
                if vocab.is_eog(LlamaToken(tok.cast_signed())) {
                    break Finish::Stop;
                }
                if let Some(c) = req.constraint.as_mut() {
                    let t = Instant::now();
                    c.commit(&[tok])?;
                    timings.constraint += t.elapsed();
                }
                sampled_n += 1;
                next.push(tok);
            } else {
                forced_n += u32::try_from(next.len()).unwrap_or(u32::MAX);
            }
            produced += u32::try_from(next.len()).unwrap_or(u32::MAX);
            for &tok in &next {
                let piece = vocab.token_to_piece(LlamaToken(tok.cast_signed()), false, None);
                let s = text.push(&piece);
                emit(&s, &mut out);
            }
            // The grammar is complete: no need to evaluate what was appended.
            if req.constraint.as_ref().is_some_and(|c| c.is_done()) || produced >= max_tokens {
                continue;
            }
            let t = Instant::now();
            for chunk in next.chunks(n_batch as usize) {
                batch.clear();
                for (i, &tok) in chunk.iter().enumerate() {
                    batch
                        .add(LlamaToken(tok.cast_signed()), pos, &[0], i + 1 == chunk.len())
                        .map_err(|e| Error::Engine(e.to_string()))?;
                    evaluated.push(LlamaToken(tok.cast_signed()));
                    pos += 1;
                }
                ctx.decode(&mut batch).map_err(|e| Error::Engine(e.to_string()))?;
                calls += 1;
            }
            logits_at = batch.n_tokens() - 1;
            timings.decode += t.elapsed();
        };
        let rest = text.finish();
        emit(&rest, &mut out);
        timings.generate = generating.elapsed();
        if self.options.reuse_prefix {
            // A state that cannot be read is simply not kept.
            let t = Instant::now();
            if let Ok(state) = ctx.state_seq_get(0, LlamaStateSeqFlags::empty()) {
                // A kept state this one extends is of no more use.
                kept_states.retain(|k| !evaluated.starts_with(&k.tokens));
                if kept_states.len() >= KEPT_STATES {
                    kept_states.remove(0);
                }
                kept_states.push(Kept { n_ctx, tokens: evaluated, state });
            }
            timings.keep = t.elapsed();
        }
        Ok(Generation {
            text: out,
            finish,
            prompt_tokens,
            reused_tokens: u32::try_from(reused).unwrap_or(u32::MAX),
            output_tokens: produced,
            forced_tokens: forced_n,
            sampled_tokens: sampled_n,
            decode_calls: calls,
            timings,
        })
    }
}

/// The model's vocabulary and tokenizer for llguidance.
struct LlamaTokEnv {
    trie: TokTrie,
    model: Arc<LlamaModel>,
}

impl TokenizerEnv for LlamaTokEnv {
    fn tok_trie(&self) -> &TokTrie {
        &self.trie
    }

    fn tokenize_bytes(&self, s: &[u8]) -> Vec<TokenId> {
        self.model.vocab().tokenize(s, false, false).into_iter().map(|t| t.0.cast_unsigned()).collect()
    }

    fn tokenize_is_canonical(&self) -> bool {
        true
    }
}

/// The conversation as (role, content) pairs for a chat template. Tool
/// results are `tool` turns; a template that does not know that role treats
/// it like any other name.
pub fn chat_turns(messages: &[Message]) -> Vec<(&'static str, String)> {
    messages.iter().map(|m| (m.role.as_str(), m.content.replace('\0', ""))).collect()
}

/// The token to emit: the most likely allowed one, or at `temperature` a
/// draw from the allowed tokens' softmax. `None` when nothing is allowed.
pub fn pick(logits: &[f32], mask: Option<&[u32]>, temperature: Option<f32>, rng: &mut u64) -> Option<u32> {
    let allowed = |i: usize| mask.is_none_or(|m| is_allowed(m, u32::try_from(i).unwrap_or(u32::MAX)));
    let mut best: Option<(usize, f32)> = None;
    for (i, &l) in logits.iter().enumerate() {
        if l.is_finite() && allowed(i) && best.is_none_or(|(_, b)| l > b) {
            best = Some((i, l));
        }
    }
    let (best_i, best_l) = best?;
    let Some(t) = temperature else { return u32::try_from(best_i).ok() };
    let weights: Vec<(usize, f32)> = logits
        .iter()
        .enumerate()
        .filter(|(i, l)| l.is_finite() && allowed(*i))
        .map(|(i, &l)| (i, ((l - best_l) / t).exp()))
        .collect();
    let total: f32 = weights.iter().map(|(_, w)| w).sum();
    let mut target = next_f32(rng) * total;
    for (i, w) in &weights {
        if target < *w {
            return u32::try_from(*i).ok();
        }
        target -= w;
    }
    u32::try_from(best_i).ok()
}

/// xorshift64*: a uniform draw in [0, 1).
fn next_f32(state: &mut u64) -> f32 {
    let mut x = *state;
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    *state = x;
    let bits = x.wrapping_mul(0x2545_f491_4f6c_dd1d) >> 40;
    #[allow(clippy::cast_precision_loss)]
    let f = bits as f32 / (1u64 << 24) as f32;
    f
}

/// Turns token bytes into text, holding back a UTF-8 sequence split across
/// tokens until it is complete.
#[derive(Debug, Default)]
pub struct Detokenizer {
    pending: Vec<u8>,
}

impl Detokenizer {
    /// Adds a token's bytes; returns the text that is now complete.
    pub fn push(&mut self, bytes: &[u8]) -> String {
        self.pending.extend_from_slice(bytes);
        let valid = match std::str::from_utf8(&self.pending) {
            Ok(_) => self.pending.len(),
            // An incomplete sequence at the end waits for the next token;
            // an invalid one is replaced now.
            Err(e) if e.error_len().is_none() => e.valid_up_to(),
            Err(_) => {
                let s = String::from_utf8_lossy(&self.pending).into_owned();
                self.pending.clear();
                return s;
            }
        };
        let rest = self.pending.split_off(valid);
        let done = std::mem::replace(&mut self.pending, rest);
        String::from_utf8(done).unwrap_or_default()
    }

    /// Whatever is left, invalid bytes replaced.
    pub fn finish(&mut self) -> String {
        let s = String::from_utf8_lossy(&self.pending).into_owned();
        self.pending.clear();
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pick_takes_the_best_allowed_token() {
        let logits = [1.0, 5.0, 3.0, f32::NEG_INFINITY];
        let mut rng = 7;
        assert_eq!(pick(&logits, None, None, &mut rng), Some(1));
        assert_eq!(pick(&logits, Some(&[0b101]), None, &mut rng), Some(2));
        assert_eq!(pick(&logits, Some(&[0b1000]), None, &mut rng), None);
        assert_eq!(pick(&logits, Some(&[0]), None, &mut rng), None);
    }

    #[test]
    fn pick_at_a_temperature_stays_inside_the_mask_and_follows_the_weights() {
        let logits = [0.0, 2.0, 0.0, 1.0];
        let mut rng = 42;
        let mut counts = [0u32; 4];
        for _ in 0..2000 {
            counts[pick(&logits, Some(&[0b1010]), Some(1.0), &mut rng).unwrap() as usize] += 1;
        }
        assert_eq!((counts[0], counts[2]), (0, 0));
        // e^2 : e^1 ≈ 2.7 : 1
        assert!(counts[1] > counts[3] * 2, "{counts:?}");
    }

    #[test]
    fn detokenizer_holds_back_split_characters() {
        let mut d = Detokenizer::default();
        let e = "é".as_bytes();
        assert_eq!(d.push(b"a"), "a");
        assert_eq!(d.push(&e[..1]), "");
        assert_eq!(d.push(&e[1..]), "é");
        assert_eq!(d.push(&[0xff, b'b']), "\u{fffd}b");
        assert_eq!(d.push(&e[..1]), "");
        assert_eq!(d.finish(), "\u{fffd}");
    }

    #[test]
    fn chat_turns_name_every_role() {
        let turns = chat_turns(&[Message::system("s"), Message::user("u\0"), Message::assistant("a")]);
        assert_eq!(turns, vec![("system", "s".into()), ("user", "u".into()), ("assistant", "a".into())]);
    }
}
