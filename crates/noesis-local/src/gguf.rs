//! A GGUF file checked before llama.cpp sees it.
//!
//! llama.cpp answers a bad file with "failed to load" and a log line; this
//! reads the header, the metadata and the tensor table in pure Rust so the
//! error can say what is wrong: not a GGUF file, a version this reader does
//! not know, a file cut short (the tensor data ends past the end of the
//! file), or the architecture named in `general.architecture`. Nothing is
//! allocated from sizes in the file before they are checked against its
//! length, so garbage cannot make it allocate gigabytes.

use std::io::{BufReader, Read, Seek, SeekFrom};
use std::path::Path;

/// What the header says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GgufInfo {
    /// Format version (2 or 3).
    pub version: u32,
    /// Number of tensors.
    pub tensors: u64,
    /// `general.architecture` (`llama`, `qwen2`, …).
    pub architecture: Option<String>,
    /// `general.name`.
    pub name: Option<String>,
    /// Whether `tokenizer.chat_template` is present.
    pub has_chat_template: bool,
    /// Bytes the file needs: the end of the last tensor's data.
    pub needed: u64,
    /// Bytes the file has.
    pub len: u64,
}

/// Why a file is not a usable GGUF file.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum GgufError {
    /// The first four bytes are not `GGUF`.
    #[error("not a GGUF file (it starts with {0:02x?}, not \"GGUF\")")]
    NotGguf(Vec<u8>),
    /// A version this reader does not know.
    #[error("GGUF version {0} is not supported (2 and 3 are)")]
    Version(u32),
    /// The file ends before its header, metadata or tensor data do.
    #[error("the file is truncated: it has {len} bytes, its {what} needs at least {needed}")]
    Truncated {
        /// What was being read.
        what: &'static str,
        /// Bytes needed.
        needed: u64,
        /// Bytes present.
        len: u64,
    },
    /// Something in the header makes no sense.
    #[error("malformed GGUF header: {0}")]
    Malformed(String),
    /// The file could not be read.
    #[error("{0}")]
    Io(String),
}

struct Reader<R> {
    inner: R,
    pos: u64,
    len: u64,
    what: &'static str,
}

impl<R: Read + Seek> Reader<R> {
    fn need(&self, n: u64) -> Result<(), GgufError> {
        let needed = self.pos.saturating_add(n);
        if needed > self.len {
            return Err(GgufError::Truncated { what: self.what, needed, len: self.len });
        }
        Ok(())
    }

    fn bytes<const N: usize>(&mut self) -> Result<[u8; N], GgufError> {
        self.need(N as u64)?;
        let mut b = [0u8; N];
        self.inner.read_exact(&mut b).map_err(|e| GgufError::Io(e.to_string()))?;
        self.pos += N as u64;
        Ok(b)
    }

    fn u32(&mut self) -> Result<u32, GgufError> {
        self.bytes::<4>().map(u32::from_le_bytes)
    }

    fn u64(&mut self) -> Result<u64, GgufError> {
        self.bytes::<8>().map(u64::from_le_bytes)
    }

    fn skip(&mut self, n: u64) -> Result<(), GgufError> {
        self.need(n)?;
        let off = i64::try_from(n).map_err(|_| GgufError::Malformed("length out of range".into()))?;
        self.inner.seek(SeekFrom::Current(off)).map_err(|e| GgufError::Io(e.to_string()))?;
        self.pos += n;
        Ok(())
    }

    fn string(&mut self) -> Result<String, GgufError> {
        let n = self.u64()?;
        self.need(n)?;
        let mut buf = vec![0u8; usize::try_from(n).map_err(|_| GgufError::Malformed("string too long".into()))?];
        self.inner.read_exact(&mut buf).map_err(|e| GgufError::Io(e.to_string()))?;
        self.pos += n;
        String::from_utf8(buf).map_err(|_| GgufError::Malformed("a key or string is not UTF-8".into()))
    }

    fn skip_string(&mut self) -> Result<(), GgufError> {
        let n = self.u64()?;
        self.skip(n)
    }
}

/// Value types of GGUF metadata.
const STRING: u32 = 8;
const ARRAY: u32 = 9;

fn scalar_size(t: u32) -> Option<u64> {
    match t {
        0 | 1 | 7 => Some(1),
        2 | 3 => Some(2),
        4..=6 => Some(4),
        10..=12 => Some(8),
        _ => None,
    }
}

fn skip_value<R: Read + Seek>(r: &mut Reader<R>, t: u32, depth: u32) -> Result<(), GgufError> {
    match t {
        STRING => r.skip_string(),
        ARRAY if depth < 4 => {
            let elem = r.u32()?;
            let n = r.u64()?;
            if let Some(size) = scalar_size(elem) {
                return r.skip(n.checked_mul(size).ok_or_else(|| GgufError::Malformed("array too long".into()))?);
            }
            for _ in 0..n {
                skip_value(r, elem, depth + 1)?;
            }
            Ok(())
        }
        t => match scalar_size(t) {
            Some(size) => r.skip(size),
            None => Err(GgufError::Malformed(format!("unknown metadata value type {t}"))),
        },
    }
}

/// Block size (elements) and bytes per block of the ggml tensor types this
/// reader knows; `None` for the others (their size is then not checked).
fn type_size(t: u32) -> Option<(u64, u64)> {
    Some(match t {
        0 | 26 => (1, 4),
        1 | 25 | 30 => (1, 2),
        24 => (1, 1),
        27 | 28 => (1, 8),
        2 | 20 => (32, 18),
        3 => (32, 20),
        6 => (32, 22),
        7 => (32, 24),
        8 => (32, 34),
        9 => (32, 36),
        10 => (256, 84),
        11 | 21 => (256, 110),
        12 => (256, 144),
        13 => (256, 176),
        14 => (256, 210),
        15 => (256, 292),
        16 => (256, 66),
        17 => (256, 74),
        18 => (256, 98),
        19 => (256, 50),
        22 => (256, 82),
        23 => (256, 136),
        29 => (256, 56),
        _ => return None,
    })
}

/// Reads and checks the GGUF file at `path`.
pub fn inspect(path: &Path) -> Result<GgufInfo, GgufError> {
    let file = std::fs::File::open(path).map_err(|e| GgufError::Io(e.to_string()))?;
    let len = file.metadata().map_err(|e| GgufError::Io(e.to_string()))?.len();
    read(BufReader::new(file), len)
}

/// Reads a GGUF header from `inner`, which holds `len` bytes.
pub fn read<R: Read + Seek>(inner: R, len: u64) -> Result<GgufInfo, GgufError> {
    let mut r = Reader { inner, pos: 0, len, what: "header" };
    if len < 4 {
        return Err(GgufError::Truncated { what: "header", needed: 4, len });
    }
    let magic = r.bytes::<4>()?;
    if &magic != b"GGUF" {
        return Err(GgufError::NotGguf(magic.to_vec()));
    }
    let version = r.u32()?;
    if !(2..=3).contains(&version) {
        return Err(GgufError::Version(version));
    }
    let tensors = r.u64()?;
    let kvs = r.u64()?;
    r.what = "metadata";
    let mut info =
        GgufInfo { version, tensors, architecture: None, name: None, has_chat_template: false, needed: 0, len };
    let mut alignment = 32u64;
    for _ in 0..kvs {
        let key = r.string()?;
        let t = r.u32()?;
        match (key.as_str(), t) {
            ("general.architecture", STRING) => info.architecture = Some(r.string()?),
            ("general.name", STRING) => info.name = Some(r.string()?),
            ("general.alignment", 4) => {
                alignment = u64::from(r.u32()?);
                if alignment == 0 || !alignment.is_power_of_two() {
                    return Err(GgufError::Malformed(format!("general.alignment {alignment} is not a power of two")));
                }
            }
            ("tokenizer.chat_template", STRING) => {
                info.has_chat_template = true;
                r.skip_string()?;
            }
            _ => skip_value(&mut r, t, 0)?,
        }
    }
    r.what = "tensor table";
    let mut data_end = 0u64;
    for _ in 0..tensors {
        let name = r.string()?;
        let dims = r.u32()?;
        if dims > 8 {
            return Err(GgufError::Malformed(format!("tensor `{name}` has {dims} dimensions")));
        }
        let mut elements = 1u64;
        for _ in 0..dims {
            elements = elements.saturating_mul(r.u64()?);
        }
        let ty = r.u32()?;
        let offset = r.u64()?;
        let size = type_size(ty).map_or(0, |(block, bytes)| elements.div_ceil(block).saturating_mul(bytes));
        data_end = data_end.max(offset.saturating_add(size));
    }
    let data_start = r.pos.div_ceil(alignment) * alignment;
    info.needed = if tensors == 0 { r.pos } else { data_start.saturating_add(data_end) };
    if info.needed > len {
        return Err(GgufError::Truncated { what: "tensor data", needed: info.needed, len });
    }
    Ok(info)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use std::io::Cursor;

    /// A GGUF v3 file: `kvs` string metadata and `tensors` F32 tensors of
    /// `elements` each, data included.
    pub(crate) fn build(kvs: &[(&str, &str)], tensors: u64, elements: u64) -> Vec<u8> {
        let mut b = Vec::new();
        let s = |b: &mut Vec<u8>, s: &str| {
            b.extend((s.len() as u64).to_le_bytes());
            b.extend(s.as_bytes());
        };
        b.extend(b"GGUF");
        b.extend(3u32.to_le_bytes());
        b.extend(tensors.to_le_bytes());
        b.extend((kvs.len() as u64).to_le_bytes());
        for (k, v) in kvs {
            s(&mut b, k);
            b.extend(STRING.to_le_bytes());
            s(&mut b, v);
        }
        for i in 0..tensors {
            s(&mut b, &format!("t{i}"));
            b.extend(1u32.to_le_bytes());
            b.extend(elements.to_le_bytes());
            b.extend(0u32.to_le_bytes());
            b.extend((i * elements * 4).to_le_bytes());
        }
        if tensors > 0 {
            b.resize(b.len().div_ceil(32) * 32, 0);
            b.resize(b.len() + (tensors * elements * 4) as usize, 0);
        }
        b
    }

    fn check(bytes: &[u8]) -> Result<GgufInfo, GgufError> {
        read(Cursor::new(bytes), bytes.len() as u64)
    }

    #[test]
    fn reads_architecture_and_sizes() {
        let bytes = build(&[("general.architecture", "llama"), ("tokenizer.chat_template", "{{x}}")], 2, 8);
        let info = check(&bytes).unwrap();
        assert_eq!(info.architecture.as_deref(), Some("llama"));
        assert!(info.has_chat_template);
        assert_eq!((info.tensors, info.needed, info.len), (2, bytes.len() as u64, bytes.len() as u64));
    }

    #[test]
    fn names_what_is_wrong() {
        let good = build(&[("general.architecture", "llama")], 1, 64);
        for (bytes, want) in [
            (b"PK\x03\x04rest".to_vec(), "not a GGUF file"),
            (b"GG".to_vec(), "truncated: it has 2 bytes, its header needs at least 4"),
            ([b"GGUF".as_slice(), &9u32.to_le_bytes()].concat(), "GGUF version 9"),
            (good[..40].to_vec(), "its metadata needs"),
            (good[..good.len() - 1].to_vec(), "its tensor data needs at least"),
        ] {
            let e = check(&bytes).unwrap_err().to_string();
            assert!(e.contains(want), "{e}");
        }
        // A string length larger than the file is refused before allocating.
        let mut huge = build(&[("general.architecture", "llama")], 0, 0);
        huge[24..32].copy_from_slice(&u64::MAX.to_le_bytes());
        assert!(matches!(check(&huge), Err(GgufError::Truncated { .. })));
    }

    mod props {
        use proptest::prelude::*;

        use super::*;

        fn valid() -> impl Strategy<Value = (Vec<(String, String)>, u64, u64)> {
            let kv = ("[a-z.]{1,12}", "\\PC{0,16}");
            (proptest::collection::vec(kv, 0..5), 0u64..4, 0u64..64)
        }

        proptest! {
            /// Any bytes after a GGUF magic give a header or a typed error.
            #[test]
            fn prop_any_bytes_give_an_answer_not_a_panic(
                version in prop_oneof![Just(2u32), Just(3u32), any::<u32>()],
                rest in proptest::collection::vec(any::<u8>(), 0..256),
            ) {
                let bytes = [b"GGUF".as_slice(), &version.to_le_bytes(), &rest].concat();
                let _ = check(&bytes);
            }

            /// Well-formed files read back what was written, and every
            /// proper prefix of one is refused (never read as a whole).
            #[test]
            fn prop_files_read_back_and_prefixes_are_refused((kvs, tensors, elements) in valid(), cut in any::<prop::sample::Index>()) {
                let kvs: Vec<(&str, &str)> = kvs.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
                let bytes = build(&kvs, tensors, elements);
                let info = check(&bytes).unwrap();
                prop_assert_eq!(info.tensors, tensors);
                prop_assert_eq!(info.needed, bytes.len() as u64);
                let at = cut.index(bytes.len());
                prop_assert!(check(&bytes[..at]).is_err());
            }

            /// Corrupting any bytes of a well-formed file never panics.
            #[test]
            fn prop_corrupted_files_do_not_panic(
                (kvs, tensors, elements) in valid(),
                flips in proptest::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..8),
            ) {
                let kvs: Vec<(&str, &str)> = kvs.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
                let mut bytes = build(&kvs, tensors, elements);
                for (at, byte) in flips {
                    let i = at.index(bytes.len());
                    bytes[i] = byte;
                }
                let _ = check(&bytes);
            }
        }
    }
}
