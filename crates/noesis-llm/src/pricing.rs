//! What tokens cost: a price table (built in, overridable from config) and
//! budgets that several runs can share.

use std::sync::Mutex;

use crate::error::{ErrorKind, ProviderError};
use crate::types::{ChatRequest, Usage};

/// US dollars per million tokens.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Price {
    /// Per million input (prompt) tokens.
    pub input: f64,
    /// Per million output (completion) tokens.
    pub output: f64,
}

/// List prices of common models, USD per million tokens, as published by
/// their vendors when this table was written. Prices change: `[prices]` in
/// `noesis.toml` overrides any entry, and a model not listed has no cost
/// (reported as unknown, never as zero).
const BUILTIN: &[(&str, Price)] = &[
    ("gpt-4o-mini", Price { input: 0.15, output: 0.60 }),
    ("gpt-4o", Price { input: 2.50, output: 10.00 }),
    ("gpt-4.1-nano", Price { input: 0.10, output: 0.40 }),
    ("gpt-4.1-mini", Price { input: 0.40, output: 1.60 }),
    ("gpt-4.1", Price { input: 2.00, output: 8.00 }),
    ("o4-mini", Price { input: 1.10, output: 4.40 }),
    ("claude-3-5-haiku", Price { input: 0.80, output: 4.00 }),
    ("claude-haiku-4-5", Price { input: 1.00, output: 5.00 }),
    ("claude-sonnet-4", Price { input: 3.00, output: 15.00 }),
    ("claude-opus-4", Price { input: 15.00, output: 75.00 }),
    ("gemini-2.5-flash-lite", Price { input: 0.10, output: 0.40 }),
    ("gemini-2.5-flash", Price { input: 0.30, output: 2.50 }),
    ("gemini-2.5-pro", Price { input: 1.25, output: 10.00 }),
    ("deepseek-chat", Price { input: 0.27, output: 1.10 }),
    ("deepseek-reasoner", Price { input: 0.55, output: 2.19 }),
];

/// Prices by model name.
///
/// Lookup is exact first, then the longest entry that prefixes the model
/// (`gpt-4o-mini-2024-07-18` costs what `gpt-4o-mini` costs), also after a
/// vendor prefix (`openai/gpt-4o-mini` on OpenRouter).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct PriceTable {
    entries: Vec<(String, Price)>,
}

impl PriceTable {
    /// The built-in table.
    pub fn builtin() -> PriceTable {
        PriceTable { entries: BUILTIN.iter().map(|(m, p)| ((*m).to_owned(), *p)).collect() }
    }

    /// Adds or replaces the price of `model`.
    pub fn set(&mut self, model: &str, price: Price) {
        match self.entries.iter_mut().find(|(m, _)| m == model) {
            Some(e) => e.1 = price,
            None => self.entries.push((model.to_owned(), price)),
        }
    }

    /// The price of `model`, if known.
    pub fn price(&self, model: &str) -> Option<Price> {
        lookup(self.entries.iter().map(|(m, p)| (m.as_str(), *p)), model)
    }

    /// What `usage` on `model` cost, if the model's price is known.
    pub fn cost(&self, model: &str, usage: Usage) -> Option<f64> {
        self.price(model)
            .map(|p| (usage.input_tokens as f64 * p.input + usage.output_tokens as f64 * p.output) / 1_000_000.0)
    }
}

/// The entry for `model` among `entries`: exact first, then the longest
/// entry that prefixes it up to a `-`, `@` or `:`, also after a vendor
/// prefix (`openai/gpt-4o-mini`).
fn lookup<'a, T: Copy>(entries: impl Iterator<Item = (&'a str, T)> + Clone, model: &str) -> Option<T> {
    let bare = model.rsplit('/').next().unwrap_or(model);
    [model, bare].into_iter().find_map(|name| {
        entries.clone().find(|(m, _)| *m == name).map(|(_, v)| v).or_else(|| {
            entries
                .clone()
                .filter(|(m, _)| name.starts_with(m) && name[m.len()..].starts_with(['-', '@', ':']))
                .max_by_key(|(m, _)| m.len())
                .map(|(_, v)| v)
        })
    })
}

/// Context windows of common models, in tokens, as their vendors publish
/// them (the embedded local model's from its file). `[agent]
/// context_window` in `noesis.toml` overrides; a model not listed has no
/// known window (a run then compacts when the provider refuses a request
/// as too long, or is seen to cut one).
const WINDOWS: &[(&str, u64)] = &[
    ("gpt-4o", 128_000),
    ("gpt-4o-mini", 128_000),
    ("gpt-4.1", 1_047_576),
    ("gpt-4.1-mini", 1_047_576),
    ("gpt-4.1-nano", 1_047_576),
    ("gpt-5", 400_000),
    ("o3", 200_000),
    ("o4-mini", 200_000),
    ("claude-3-5-haiku", 200_000),
    ("claude-haiku-4-5", 200_000),
    ("claude-sonnet-4", 200_000),
    ("claude-opus-4", 200_000),
    ("gemini-2.5-flash", 1_048_576),
    ("gemini-2.5-flash-lite", 1_048_576),
    ("gemini-2.5-pro", 1_048_576),
    ("deepseek-chat", 65_536),
    ("deepseek-reasoner", 65_536),
    ("SmolLM2", 8_192),
];

/// The context window of `model` in tokens, if known (see [`WINDOWS`]'s
/// lookup rule: `gpt-4o-2024-08-06` has `gpt-4o`'s).
pub fn context_window(model: &str) -> Option<u64> {
    lookup(WINDOWS.iter().copied(), model)
}

/// Limits on what a run (or several sharing it) may spend.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Budget {
    /// Most input + output tokens.
    pub max_tokens: Option<u64>,
    /// Most US dollars.
    pub max_cost_usd: Option<f64>,
}

/// What has been spent so far.
#[derive(Debug, Clone, Copy, Default, PartialEq, serde::Serialize)]
pub struct Spent {
    /// Tokens in and out.
    pub usage: Usage,
    /// Dollars, counting only calls whose price is known.
    pub cost_usd: f64,
    /// Calls whose model had no known price.
    pub unpriced_calls: u32,
}

/// A [`Budget`] and what has been spent against it; share it (`Arc`) to
/// give several runs one budget.
///
/// A call first [reserves](BudgetMeter::reserve) what it may cost at most —
/// its estimated prompt plus its output cap, priced — in one step with the
/// check, so runs in parallel cannot all pass the check before any of them
/// is charged; the [`Reservation`] is then settled to the real usage, or
/// released when the call fails.
#[derive(Debug, Default)]
pub struct BudgetMeter {
    budget: Budget,
    ledger: Mutex<Ledger>,
    /// Told whenever held room is given back (settled or released), for
    /// calls waiting on calls in flight.
    freed: tokio::sync::Notify,
}

#[derive(Debug, Default)]
struct Ledger {
    spent: Spent,
    /// Held by calls in flight.
    reserved_tokens: u64,
    reserved_cost: f64,
}

/// Output tokens held for a call that sets no cap of its own (see
/// [`BudgetMeter::reserve_request`]).
pub const OUTPUT_ALLOWANCE: u64 = 8192;

/// Why a [`BudgetMeter`] refused a call.
#[derive(Debug, Clone, PartialEq)]
pub struct Refusal {
    /// The cost limit refused it (else the token limit).
    pub cost: bool,
    /// The limit and the figures, in words.
    pub message: String,
}

/// Room held in a [`BudgetMeter`] for one call in flight. Settle it with
/// the call's real usage; dropping it unsettled releases the room (a failed
/// call costs nothing).
#[derive(Debug)]
#[must_use = "a reservation is released when dropped: settle it once the call has answered"]
pub struct Reservation<'m> {
    meter: &'m BudgetMeter,
    input_tokens: u64,
    output_tokens: u64,
    cost: Option<f64>,
    open: bool,
}

impl BudgetMeter {
    /// A meter with nothing spent.
    pub fn new(budget: Budget) -> BudgetMeter {
        BudgetMeter { budget, ledger: Mutex::new(Ledger::default()), freed: tokio::sync::Notify::new() }
    }

    /// The limits.
    pub fn budget(&self) -> Budget {
        self.budget
    }

    fn ledger(&self) -> std::sync::MutexGuard<'_, Ledger> {
        // Every update leaves the ledger consistent, so a panic elsewhere
        // cannot have left it half-written.
        self.ledger.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// What has been spent (settled calls only).
    pub fn spent(&self) -> Spent {
        self.ledger().spent
    }

    /// Tokens and dollars held by calls in flight.
    pub fn reserved(&self) -> (u64, f64) {
        let l = self.ledger();
        (l.reserved_tokens, l.reserved_cost)
    }

    /// Records a call's usage and cost (for calls that were not reserved).
    pub fn charge(&self, usage: Usage, cost: Option<f64>) {
        self.ledger().charge(usage, cost);
    }

    /// The most output tokens a call with `input_tokens` of prompt can be
    /// given and still fit every limit, counting what is spent and what
    /// calls in flight hold: what a caller sets as the request's output cap
    /// when it has none, so the reservation covers the whole call. `None`
    /// when nothing bounds it (no token limit, and no cost limit or no
    /// price).
    pub fn room_for_output(&self, input_tokens: u64, price: Option<Price>) -> Option<u64> {
        self.room(input_tokens, price, true)
    }

    fn room(&self, input_tokens: u64, price: Option<Price>, counting_held: bool) -> Option<u64> {
        let l = self.ledger();
        let held = if counting_held { (l.reserved_tokens, l.reserved_cost) } else { (0, 0.0) };
        let by_tokens = self.budget.max_tokens.map(|limit| {
            let used = l.spent.usage.input_tokens.saturating_add(l.spent.usage.output_tokens);
            limit.saturating_sub(used).saturating_sub(held.0).saturating_sub(input_tokens)
        });
        let by_cost = match (self.budget.max_cost_usd, price) {
            (Some(limit), Some(p)) if p.output > 0.0 => {
                let left = limit - l.spent.cost_usd - held.1 - input_tokens as f64 * p.input / 1_000_000.0;
                // Float division of a non-negative, finite figure: the cast
                // saturates, and rounding down keeps the call inside.
                Some(if left <= 0.0 { 0 } else { (left * 1_000_000.0 / p.output).floor() as u64 })
            }
            _ => None,
        };
        match (by_tokens, by_cost) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// Reserves room for a call expected to use `input_tokens` and up to
    /// `max_output` more, at `price` when known, or refuses it when that
    /// would break a limit counting what is spent and what calls in flight
    /// hold. Without `max_output` only the prompt is reserved; without a
    /// price the cost limit cannot be checked for this call.
    pub fn reserve(
        &self,
        provider: &str,
        input_tokens: u64,
        max_output: Option<u32>,
        price: Option<Price>,
    ) -> Result<Reservation<'_>, ProviderError> {
        self.reserve_for(input_tokens, max_output, price)
            .map_err(|r| ProviderError::new(provider, ErrorKind::Budget, r.message))
    }

    /// Reserves room for `request` as it will be sent: its prompt
    /// estimated ([`estimate_request_tokens`]) and its output cap. A
    /// request without a cap is held at [`OUTPUT_ALLOWANCE`]; when less
    /// than that is left it is given what is left as its cap (at least one
    /// token, so a spent budget refuses rather than sends), so the reply
    /// cannot cross the limit. Far from the limit the cap stays unset:
    /// providers refuse caps above their model's maximum.
    pub fn reserve_request(&self, request: &mut ChatRequest, price: Option<Price>) -> Result<Reservation<'_>, Refusal> {
        let input = estimate_request_tokens(request);
        if request.max_tokens.is_none()
            && let Some(room) = self.room_for_output(input, price)
            && room < OUTPUT_ALLOWANCE
        {
            request.max_tokens = Some(u32::try_from(room.max(1)).unwrap_or(u32::MAX));
        }
        let held = request.max_tokens.or(u32::try_from(OUTPUT_ALLOWANCE).ok());
        self.reserve_for(input, held, price)
    }

    /// [`BudgetMeter::reserve_request`] for calls that may run at once:
    /// when what calls in flight hold is all that keeps this one from
    /// getting its full allowance (or from fitting at all), it waits for
    /// them to settle instead of being refused or sent with a cap cut to
    /// the little that is left. Refused only by what is spent.
    pub async fn reserve_request_waiting(
        &self,
        request: &mut ChatRequest,
        price: Option<Price>,
    ) -> Result<Reservation<'_>, Refusal> {
        loop {
            // Registered before the check, so a settle in between is not
            // missed.
            let freed = self.freed.notified();
            tokio::pin!(freed);
            freed.as_mut().enable();
            let input = estimate_request_tokens(request);
            let held = self.reserved().0 > 0;
            let with_held = self.room(input, price, true);
            let without = self.room(input, price, false);
            let need = request.max_tokens.map_or(OUTPUT_ALLOWANCE, u64::from);
            let starved = match (with_held, without) {
                (Some(a), Some(b)) => a < need && b > a,
                _ => false,
            };
            if held && starved {
                freed.await;
                continue;
            }
            return self.reserve_request(request, price);
        }
    }

    /// [`BudgetMeter::reserve`], saying which limit refused the call.
    pub fn reserve_for(
        &self,
        input_tokens: u64,
        max_output: Option<u32>,
        price: Option<Price>,
    ) -> Result<Reservation<'_>, Refusal> {
        let output_tokens = u64::from(max_output.unwrap_or(0));
        let next = input_tokens.saturating_add(output_tokens);
        let cost = price.map(|p| (input_tokens as f64 * p.input + output_tokens as f64 * p.output) / 1_000_000.0);
        let mut l = self.ledger();
        if let Some(limit) = self.budget.max_tokens {
            let used = l.spent.usage.input_tokens.saturating_add(l.spent.usage.output_tokens);
            let held = l.reserved_tokens;
            if used >= limit || used.saturating_add(held).saturating_add(next) > limit {
                let in_flight = if held > 0 { format!(", {held} held by calls in flight") } else { String::new() };
                return Err(Refusal {
                    cost: false,
                    message: format!(
                        "token budget exceeded: {used} tokens used{in_flight}, about {next} more needed, limit {limit} (raise it with --max-total-tokens or [budget] max_tokens)"
                    ),
                });
            }
        }
        if let Some(limit) = self.budget.max_cost_usd {
            let spent = l.spent.cost_usd;
            let held = l.reserved_cost;
            if spent >= limit || cost.is_some_and(|c| spent + held + c > limit) {
                let in_flight =
                    if held > 0.0 { format!(", ${held:.4} held by calls in flight") } else { String::new() };
                let next = cost.map_or(String::new(), |c| format!(", this call may cost up to ${c:.4}"));
                return Err(Refusal {
                    cost: true,
                    message: format!(
                        "cost budget exceeded: ${spent:.4} spent{in_flight}{next}, limit ${limit:.4} (raise it with --max-cost or [budget] max_cost_usd)"
                    ),
                });
            }
        }
        l.reserved_tokens = l.reserved_tokens.saturating_add(next);
        l.reserved_cost += cost.unwrap_or(0.0);
        Ok(Reservation { meter: self, input_tokens, output_tokens, cost, open: true })
    }
}

impl Ledger {
    fn charge(&mut self, usage: Usage, cost: Option<f64>) {
        self.spent.usage += usage;
        match cost {
            Some(c) => self.spent.cost_usd += c,
            None => self.spent.unpriced_calls += 1,
        }
    }

    fn release(&mut self, tokens: u64, cost: Option<f64>) {
        self.reserved_tokens = self.reserved_tokens.saturating_sub(tokens);
        // Sums and differences of floats drift; nothing held is exactly 0.
        self.reserved_cost = (self.reserved_cost - cost.unwrap_or(0.0)).max(0.0);
        if self.reserved_tokens == 0 {
            self.reserved_cost = 0.0;
        }
    }
}

impl Reservation<'_> {
    /// The call answered: charge what it really used and release the rest.
    pub fn settle(mut self, usage: Usage, cost: Option<f64>) {
        {
            let mut l = self.meter.ledger();
            l.release(self.input_tokens + self.output_tokens, self.cost);
            l.charge(usage, cost);
        }
        self.open = false;
        self.meter.freed.notify_waiters();
    }

    /// The call answered without saying what it used: charge the estimate,
    /// so a provider that reports nothing cannot run past the budget.
    pub fn settle_at_estimate(self) {
        let usage = Usage { input_tokens: self.input_tokens, output_tokens: self.output_tokens };
        let cost = self.cost;
        self.settle(usage, cost);
    }
}

impl Drop for Reservation<'_> {
    fn drop(&mut self) {
        if self.open {
            self.meter.ledger().release(self.input_tokens + self.output_tokens, self.cost);
            self.meter.freed.notify_waiters();
        }
    }
}

/// The prompt tokens a request will take, estimated: every message's text
/// and tool calls, and the tools offered (their schemas are sent too).
pub fn estimate_request_tokens(request: &ChatRequest) -> u64 {
    let mut tokens = 0u64;
    for m in &request.messages {
        // A few tokens of framing per message (role, separators).
        tokens += 4 + estimate_tokens(&m.content);
        for c in &m.tool_calls {
            tokens += estimate_tokens(&c.name) + estimate_tokens(&c.arguments.to_string());
        }
    }
    for t in &request.tools {
        tokens +=
            estimate_tokens(&t.name) + estimate_tokens(&t.description) + estimate_tokens(&t.parameters.to_string());
    }
    tokens
}

/// A token count for text without the model's tokenizer, shaped like the
/// BPE vocabularies chat models use: a run of ASCII letters costs one token
/// per five letters (common words are one token), a run of digits one per
/// three (digits are grouped by three), every other visible character
/// (punctuation, CJK, symbols) one, and spaces ride along with the word
/// they precede. It errs high on JSON punctuation and low on rare words —
/// an estimate for size limits and budgets before the provider has counted.
pub fn estimate_tokens(text: &str) -> u64 {
    #[derive(PartialEq)]
    enum Run {
        None,
        Letters,
        Digits,
    }
    let mut tokens = 0u64;
    let (mut run, mut len) = (Run::None, 0u64);
    let close = |run: &Run, len: u64| match run {
        Run::Letters => len.div_ceil(5),
        Run::Digits => len.div_ceil(3),
        Run::None => 0,
    };
    for c in text.chars() {
        let kind = if c.is_ascii_alphabetic() {
            Run::Letters
        } else if c.is_ascii_digit() {
            Run::Digits
        } else {
            Run::None
        };
        if kind != run {
            tokens += close(&run, len);
            len = 0;
        }
        if kind == Run::None {
            if !c.is_whitespace() {
                tokens += 1;
            }
        } else {
            len += 1;
        }
        run = kind;
    }
    tokens + close(&run, len)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn context_windows_are_looked_up_like_prices() {
        assert_eq!(context_window("gpt-4o-2024-08-06"), Some(128_000));
        assert_eq!(context_window("openai/gpt-4.1-mini"), Some(1_047_576));
        assert_eq!(context_window("claude-sonnet-4-20250514"), Some(200_000));
        assert_eq!(context_window("SmolLM2-135M-Instruct.Q4_1"), Some(8_192));
        assert_eq!(context_window("llama3.2"), None, "Ollama models are found by the tokens they report");
    }

    #[test]
    fn lookup_prefers_exact_then_longest_prefix() {
        let t = PriceTable::builtin();
        assert_eq!(t.price("gpt-4o").unwrap().input, 2.50);
        assert_eq!(t.price("gpt-4o-mini-2024-07-18").unwrap().input, 0.15);
        assert_eq!(t.price("openai/gpt-4o-mini").unwrap().output, 0.60);
        assert_eq!(t.price("claude-sonnet-4-5-20250929").unwrap().input, 3.00);
        assert_eq!(t.price("gemini-2.5-flash-lite").unwrap().input, 0.10);
        // "gpt-4o" must not price "gpt-4omega".
        assert_eq!(t.price("gpt-4omega"), None);
        assert_eq!(t.price("llama3.2"), None);
    }

    #[test]
    fn overrides_replace_and_add() {
        let mut t = PriceTable::builtin();
        t.set("gpt-4o", Price { input: 1.0, output: 2.0 });
        t.set("llama3.2", Price { input: 0.0, output: 0.0 });
        assert_eq!(t.price("gpt-4o"), Some(Price { input: 1.0, output: 2.0 }));
        assert_eq!(t.cost("llama3.2", Usage { input_tokens: 10, output_tokens: 10 }), Some(0.0));
        let c = t.cost("gpt-4o", Usage { input_tokens: 1_000_000, output_tokens: 500_000 }).unwrap();
        assert!((c - 2.0).abs() < 1e-9, "{c}");
        assert_eq!(t.cost("unknown", Usage::default()), None);
    }

    #[test]
    fn meter_refuses_calls_past_the_limits() {
        let m = BudgetMeter::new(Budget { max_tokens: Some(100), max_cost_usd: Some(0.01) });
        m.reserve("p", 50, Some(40), None).unwrap().settle(Usage { input_tokens: 60, output_tokens: 10 }, Some(0.004));
        assert_eq!(m.reserve("p", 20, Some(20), None).unwrap_err().kind, ErrorKind::Budget);
        m.reserve("p", 10, Some(10), None).unwrap().settle(Usage { input_tokens: 10, output_tokens: 10 }, None);
        assert_eq!(m.spent().unpriced_calls, 1);
        let e = m.reserve("p", 20, None, None).unwrap_err();
        assert!(e.message.contains("90 tokens used"), "{}", e.message);
        m.charge(Usage::default(), Some(0.01));
        let m2 = BudgetMeter::new(Budget { max_tokens: None, max_cost_usd: Some(0.01) });
        m2.charge(Usage::default(), Some(0.02));
        assert!(m2.reserve("p", 0, None, None).unwrap_err().message.contains("cost budget exceeded"));
    }

    const DOLLAR_PER_TOKEN: Price = Price { input: 1_000_000.0, output: 1_000_000.0 };

    #[test]
    fn reservations_count_against_the_limits_until_settled_or_released() {
        let m = BudgetMeter::new(Budget { max_tokens: Some(100), max_cost_usd: Some(10.0) });
        let a = m.reserve("p", 2, Some(3), Some(DOLLAR_PER_TOKEN)).unwrap();
        assert_eq!(m.reserved(), (5, 5.0));
        // 5 held + 6 more would break the $10 limit though nothing is spent.
        let e = m.reserve("p", 3, Some(3), Some(DOLLAR_PER_TOKEN)).unwrap_err();
        assert!(e.message.contains("$5.0000 held by calls in flight"), "{}", e.message);
        let b = m.reserve("p", 2, Some(3), Some(DOLLAR_PER_TOKEN)).unwrap();
        drop(b);
        assert_eq!(m.reserved(), (5, 5.0), "a dropped reservation is released");
        a.settle(Usage { input_tokens: 2, output_tokens: 1 }, Some(3.0));
        assert_eq!(m.reserved(), (0, 0.0));
        assert_eq!(m.spent().cost_usd, 3.0);
        assert_eq!(m.spent().usage, Usage { input_tokens: 2, output_tokens: 1 });
        // What settling freed is there again.
        m.reserve("p", 3, Some(4), Some(DOLLAR_PER_TOKEN)).unwrap().settle_at_estimate();
        assert_eq!(m.spent().cost_usd, 10.0);
        assert_eq!(m.spent().usage, Usage { input_tokens: 5, output_tokens: 5 });
        assert!(m.reserve("p", 0, None, Some(DOLLAR_PER_TOKEN)).unwrap_err().message.contains("cost budget"));
    }

    #[test]
    fn a_call_that_alone_exceeds_what_is_left_is_refused() {
        let m = BudgetMeter::new(Budget { max_tokens: Some(1000), max_cost_usd: None });
        assert!(m.reserve("p", 10, Some(991), None).is_err());
        assert!(m.reserve("p", 10, Some(990), None).is_ok());
        let m = BudgetMeter::new(Budget { max_tokens: None, max_cost_usd: Some(1.0) });
        let e = m.reserve("p", 1, Some(1), Some(DOLLAR_PER_TOKEN)).unwrap_err();
        assert!(e.message.contains("this call may cost up to $2.0000"), "{}", e.message);
        // An unknown price cannot be checked against a cost limit.
        assert!(m.reserve("p", 1, Some(1), None).is_ok());
    }

    #[test]
    fn room_for_output_is_what_fits_every_limit() {
        let m = BudgetMeter::new(Budget::default());
        assert_eq!(m.room_for_output(10, Some(DOLLAR_PER_TOKEN)), None, "no limit, no bound");
        let m = BudgetMeter::new(Budget { max_tokens: Some(100), max_cost_usd: None });
        assert_eq!(m.room_for_output(30, None), Some(70));
        let held = m.reserve("p", 10, Some(10), None).unwrap();
        assert_eq!(m.room_for_output(30, None), Some(50), "calls in flight hold room");
        held.settle(Usage { input_tokens: 10, output_tokens: 5 }, None);
        assert_eq!(m.room_for_output(30, None), Some(55));
        assert_eq!(m.room_for_output(300, None), Some(0));
        // $10 left, the prompt costs $3 at $1 a token: 7 output tokens fit.
        let m = BudgetMeter::new(Budget { max_tokens: Some(1000), max_cost_usd: Some(10.0) });
        assert_eq!(m.room_for_output(3, Some(DOLLAR_PER_TOKEN)), Some(7));
        assert_eq!(m.room_for_output(3, None), Some(997), "without a price only tokens bound it");
        m.charge(Usage::default(), Some(12.0));
        assert_eq!(m.room_for_output(0, Some(DOLLAR_PER_TOKEN)), Some(0));
        // Exactly what it says fits is reserved; one more is refused.
        let m = BudgetMeter::new(Budget { max_tokens: Some(100), max_cost_usd: Some(10.0) });
        let room = u32::try_from(m.room_for_output(4, Some(DOLLAR_PER_TOKEN)).unwrap()).unwrap();
        assert_eq!(room, 6);
        assert!(m.reserve("p", 4, Some(room + 1), Some(DOLLAR_PER_TOKEN)).is_err());
        assert!(m.reserve("p", 4, Some(room), Some(DOLLAR_PER_TOKEN)).is_ok());
    }

    #[test]
    fn a_request_without_a_cap_gets_what_is_left_near_the_limit() {
        use crate::types::Message;
        let request = || ChatRequest::new(vec![Message::user("hello world")]);
        // 6 prompt tokens; far from the limit the cap stays unset and the
        // allowance is held.
        let m = BudgetMeter::new(Budget { max_tokens: Some(100_000), max_cost_usd: None });
        let mut r = request();
        let held = m.reserve_request(&mut r, None).unwrap();
        assert_eq!((r.max_tokens, m.reserved().0), (None, 6 + OUTPUT_ALLOWANCE));
        drop(held);
        let m = BudgetMeter::new(Budget { max_tokens: Some(50), max_cost_usd: None });
        let mut r = request();
        let held = m.reserve_request(&mut r, None).unwrap();
        assert_eq!((r.max_tokens, m.reserved().0), (Some(44), 50));
        held.settle(Usage { input_tokens: 6, output_tokens: 40 }, None);
        // 4 left: the prompt alone does not fit.
        let e = m.reserve_request(&mut request(), None).unwrap_err();
        assert!(!e.cost && e.message.contains("46 tokens used") && e.message.contains("limit 50"), "{}", e.message);
        // A cap of its own is kept, and held whole.
        let m = BudgetMeter::new(Budget { max_tokens: Some(50), max_cost_usd: None });
        let mut r = ChatRequest { max_tokens: Some(45), ..request() };
        assert!(m.reserve_request(&mut r, None).is_err());
        let e = BudgetMeter::new(Budget { max_tokens: None, max_cost_usd: Some(1.0) })
            .reserve_request(&mut request(), Some(DOLLAR_PER_TOKEN))
            .unwrap_err();
        assert!(e.cost && e.message.contains("cost budget exceeded"), "{}", e.message);
    }

    #[test]
    fn a_call_waits_for_calls_in_flight_rather_than_take_what_they_left() {
        use crate::types::Message;
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        let m = std::sync::Arc::new(BudgetMeter::new(Budget { max_tokens: Some(10_000), max_cost_usd: None }));
        let request = || ChatRequest::new(vec![Message::user("hello world")]);
        rt.block_on(async {
            // Nothing in flight: no wait, the allowance is held.
            let mut r = request();
            let first = m.reserve_request_waiting(&mut r, None).await.unwrap();
            assert_eq!((r.max_tokens, m.reserved().0), (None, 6 + OUTPUT_ALLOWANCE));
            // The second would get 10,000 - 8,198 - 6 tokens as its cap:
            // it waits until the first settles, then gets what is left.
            let meter = std::sync::Arc::clone(&m);
            let second = tokio::spawn(async move {
                let mut r = request();
                let held = meter.reserve_request_waiting(&mut r, None).await.map(|h| h.settle_at_estimate());
                (held.is_ok(), r.max_tokens)
            });
            tokio::task::yield_now().await;
            assert!(!second.is_finished(), "it waits while the first is in flight");
            first.settle(Usage { input_tokens: 6, output_tokens: 94 }, None);
            // 9,894 left: room for the whole allowance again.
            assert_eq!(second.await.unwrap(), (true, None));
            assert_eq!(m.spent().usage.input_tokens + m.spent().usage.output_tokens, 100 + 6 + OUTPUT_ALLOWANCE);
            // Refused at once when what is spent leaves no room: nothing in
            // flight to wait for.
            m.charge(Usage { input_tokens: 1_700, output_tokens: 0 }, None);
            let e = m.reserve_request_waiting(&mut request(), None).await.unwrap_err();
            assert!(e.message.contains("limit 10000"), "{}", e.message);
        });
    }

    #[test]
    fn a_request_is_estimated_from_its_messages_calls_and_tools() {
        use crate::types::{Message, ToolCall, ToolSpec};
        let mut r = ChatRequest::new(vec![Message::user("hello world")]);
        assert_eq!(estimate_request_tokens(&r), 4 + 2);
        r.tools.push(ToolSpec { name: "read".into(), description: "reads".into(), parameters: serde_json::json!({}) });
        assert_eq!(estimate_request_tokens(&r), 6 + 1 + 1 + 2);
        let mut call = Message::assistant("");
        call.tool_calls.push(ToolCall { id: "1".into(), name: "read".into(), arguments: serde_json::json!({"a": 1}) });
        r.messages.push(call);
        assert_eq!(estimate_request_tokens(&r), 10 + 4 + 1 + 7);
    }

    #[test]
    fn estimate_counts_words_numbers_and_symbols() {
        for (text, want) in [
            ("", 0),
            ("   \n\t", 0),
            ("abcd", 1),
            ("abcde", 1),
            ("abcdef", 2),
            ("hello world", 2),
            ("1234567", 3),
            ("{\"a\": 1}", 7),
            ("x = 1 + 0", 5),
            ("日本語", 3),
        ] {
            assert_eq!(estimate_tokens(text), want, "{text:?}");
        }
        // Long inputs scale linearly, not quadratically or by bytes.
        assert_eq!(estimate_tokens(&"word ".repeat(1000)), 1000);
        assert_eq!(estimate_tokens(&"é".repeat(10)), 10);
    }
}
