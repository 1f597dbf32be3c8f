//! The settings, as `noesis-config` reads them (`crate::config` is where
//! the commands look for them).

pub(crate) use noesis_config::{Config, granted, load};
