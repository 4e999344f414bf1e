//! Keys: what a lock is held on, and what a branch of a channel is named by.

use std::fmt;

use smol_str::SmolStr;

use crate::base::error::{Error, Result};
use crate::base::limits::MAX_KEY_BYTES;

/// A lock key or a branch key: 1 to 1,024 bytes of text.
///
/// Integers are keys too, written as their decimal digits: `7` and `"7"` name
/// the same key, in every language alike (CHAN-06). `"07"` is another key.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Key(SmolStr);

impl Key {
    /// The key's text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
    /// Checks the key is 1 to 1,024 bytes.
    pub fn check(&self) -> Result<()> {
        if self.0.is_empty() || self.0.len() > MAX_KEY_BYTES {
            return Err(Error::invalid(format!(
                "a key is 1 to 1,024 bytes of text or an integer, like 42 or \"chat-42\"; got {} bytes",
                self.0.len()
            )));
        }
        Ok(())
    }
    /// A checked key from text.
    pub fn parse(text: impl AsRef<str>) -> Result<Key> {
        let k = Key(SmolStr::new(text));
        k.check()?;
        Ok(k)
    }
}

impl fmt::Display for Key {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

macro_rules! key_from_int {
    ($($t:ty),*) => {$(
        impl From<$t> for Key {
            fn from(v: $t) -> Key { Key(SmolStr::new(itoa::Buffer::new().format(v))) }
        }
        impl From<&$t> for Key {
            fn from(v: &$t) -> Key { Key::from(*v) }
        }
    )*};
}
key_from_int!(i8, i16, i32, i64, i128, u8, u16, u32, u64, u128, isize, usize);

impl From<&str> for Key {
    fn from(v: &str) -> Key {
        Key(SmolStr::new(v))
    }
}
impl From<String> for Key {
    fn from(v: String) -> Key {
        Key(SmolStr::from(v))
    }
}
impl From<&String> for Key {
    fn from(v: &String) -> Key {
        Key(SmolStr::new(v))
    }
}
impl From<&Key> for Key {
    fn from(v: &Key) -> Key {
        v.clone()
    }
}

impl serde::Serialize for Key {
    fn serialize<S: serde::Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        s.serialize_str(&self.0)
    }
}

impl<'de> serde::Deserialize<'de> for Key {
    /// Reads a string or an integer, so the wire and JSON may carry either.
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Key, D::Error> {
        struct KeyVisitor;
        impl serde::de::Visitor<'_> for KeyVisitor {
            type Value = Key;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a key: a string or an integer")
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> std::result::Result<Key, E> {
                Ok(Key(SmolStr::new(v)))
            }
            fn visit_string<E: serde::de::Error>(self, v: String) -> std::result::Result<Key, E> {
                Ok(Key(SmolStr::from(v)))
            }
            fn visit_i64<E: serde::de::Error>(self, v: i64) -> std::result::Result<Key, E> {
                Ok(Key::from(v))
            }
            fn visit_u64<E: serde::de::Error>(self, v: u64) -> std::result::Result<Key, E> {
                Ok(Key::from(v))
            }
            fn visit_i128<E: serde::de::Error>(self, v: i128) -> std::result::Result<Key, E> {
                Ok(Key::from(v))
            }
            fn visit_u128<E: serde::de::Error>(self, v: u128) -> std::result::Result<Key, E> {
                Ok(Key::from(v))
            }
        }
        d.deserialize_any(KeyVisitor)
    }
}
