//! The E-code taxonomy of Cognitive Modules v2.2.

use std::fmt;

/// A standard error code (`E1000`…`E4007`).
///
/// Module-specific codes (`E5xxx`–`E9xxx`) are plain strings declared in a
/// module's `error_codes`; they never pass through this type.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[allow(missing_docs)] // each variant is documented by `name()`
pub enum ErrorCode {
    E1000,
    E1001,
    E1002,
    E1003,
    E1004,
    E1005,
    E1006,
    E2001,
    E2002,
    E2003,
    E2004,
    E2005,
    E2006,
    E2007,
    E3001,
    E3002,
    E3003,
    E3004,
    E3005,
    E3006,
    E4000,
    E4001,
    E4002,
    E4003,
    E4004,
    E4005,
    E4006,
    E4007,
}

/// Whether a caller can recover from an error by fixing something or retrying.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Recoverable {
    /// The caller can fix the cause (input, context) or retry.
    Yes,
    /// Retrying the same request will fail the same way.
    No,
    /// Depends on the cause; reported as `true` because a retry may help.
    Maybe,
}

impl ErrorCode {
    /// Every standard code, in numeric order.
    pub const ALL: [ErrorCode; 28] = [
        Self::E1000,
        Self::E1001,
        Self::E1002,
        Self::E1003,
        Self::E1004,
        Self::E1005,
        Self::E1006,
        Self::E2001,
        Self::E2002,
        Self::E2003,
        Self::E2004,
        Self::E2005,
        Self::E2006,
        Self::E2007,
        Self::E3001,
        Self::E3002,
        Self::E3003,
        Self::E3004,
        Self::E3005,
        Self::E3006,
        Self::E4000,
        Self::E4001,
        Self::E4002,
        Self::E4003,
        Self::E4004,
        Self::E4005,
        Self::E4006,
        Self::E4007,
    ];

    /// The code as it appears in an envelope, e.g. `"E1001"`.
    pub fn as_str(self) -> &'static str {
        self.info().0
    }

    /// The symbolic name, e.g. `"INVALID_INPUT"`.
    pub fn name(self) -> &'static str {
        self.info().1
    }

    /// Whether the caller can recover, per the specification's table.
    pub fn recoverable(self) -> Recoverable {
        self.info().2
    }

    fn info(self) -> (&'static str, &'static str, Recoverable) {
        use Recoverable::{Maybe, No, Yes};
        match self {
            Self::E1000 => ("E1000", "PARSE_ERROR", No),
            Self::E1001 => ("E1001", "INVALID_INPUT", Yes),
            Self::E1002 => ("E1002", "MISSING_REQUIRED_FIELD", Yes),
            Self::E1003 => ("E1003", "TYPE_MISMATCH", Yes),
            Self::E1004 => ("E1004", "UNSUPPORTED_VALUE", Maybe),
            Self::E1005 => ("E1005", "INPUT_TOO_LARGE", Yes),
            Self::E1006 => ("E1006", "INVALID_REFERENCE", Yes),
            Self::E2001 => ("E2001", "LOW_CONFIDENCE", Yes),
            Self::E2002 => ("E2002", "TIMEOUT", Maybe),
            Self::E2003 => ("E2003", "TOKEN_LIMIT", Yes),
            Self::E2004 => ("E2004", "NO_ACTION_POSSIBLE", No),
            Self::E2005 => ("E2005", "SEMANTIC_CONFLICT", Maybe),
            Self::E2006 => ("E2006", "AMBIGUOUS_INPUT", Yes),
            Self::E2007 => ("E2007", "INSUFFICIENT_CONTEXT", Yes),
            Self::E3001 => ("E3001", "OUTPUT_SCHEMA_VIOLATION", No),
            Self::E3002 => ("E3002", "PARTIAL_RESULT", Maybe),
            Self::E3003 => ("E3003", "MISSING_RATIONALE", No),
            Self::E3004 => ("E3004", "OVERFLOW_LIMIT", No),
            Self::E3005 => ("E3005", "INVALID_ENUM", No),
            Self::E3006 => ("E3006", "CONSTRAINT_VIOLATION", No),
            Self::E4000 => ("E4000", "INTERNAL_ERROR", No),
            Self::E4001 => ("E4001", "PROVIDER_UNAVAILABLE", Yes),
            Self::E4002 => ("E4002", "RATE_LIMITED", Yes),
            Self::E4003 => ("E4003", "CONTEXT_OVERFLOW", Maybe),
            Self::E4004 => ("E4004", "CIRCULAR_DEPENDENCY", No),
            Self::E4005 => ("E4005", "MAX_DEPTH_EXCEEDED", No),
            Self::E4006 => ("E4006", "MODULE_NOT_FOUND", Yes),
            Self::E4007 => ("E4007", "PERMISSION_DENIED", No),
        }
    }

    /// Parses an E-code (`"E3001"`) or a legacy string code (`"PARSE_ERROR"`).
    pub fn parse(s: &str) -> Option<ErrorCode> {
        if let Some(code) = Self::ALL.iter().copied().find(|c| c.as_str() == s) {
            return Some(code);
        }
        Some(match s {
            "SCHEMA_VALIDATION_FAILED" => Self::E3001,
            "UNSUPPORTED_LANGUAGE" => Self::E1004,
            "NO_SIMPLIFICATION_POSSIBLE" => Self::E2004,
            "BEHAVIOR_CHANGE_REQUIRED" => Self::E2005,
            other => return Self::ALL.iter().copied().find(|c| c.name() == other),
        })
    }
}

impl fmt::Display for ErrorCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn legacy_codes_map_to_e_codes() {
        let cases = [
            ("PARSE_ERROR", "E1000"),
            ("INVALID_INPUT", "E1001"),
            ("SCHEMA_VALIDATION_FAILED", "E3001"),
            ("UNSUPPORTED_LANGUAGE", "E1004"),
            ("NO_SIMPLIFICATION_POSSIBLE", "E2004"),
            ("BEHAVIOR_CHANGE_REQUIRED", "E2005"),
            ("INTERNAL_ERROR", "E4000"),
            ("MODULE_NOT_FOUND", "E4006"),
            ("E3005", "E3005"),
        ];
        for (legacy, code) in cases {
            assert_eq!(ErrorCode::parse(legacy).map(ErrorCode::as_str), Some(code), "{legacy}");
        }
        assert_eq!(ErrorCode::parse("E9999"), None);
        assert_eq!(ErrorCode::parse("NOPE"), None);
    }

    #[test]
    fn codes_are_unique_and_ordered() {
        let strs: Vec<_> = ErrorCode::ALL.iter().map(|c| c.as_str()).collect();
        let mut sorted = strs.clone();
        sorted.sort_unstable();
        sorted.dedup();
        assert_eq!(strs, sorted);
    }
}
