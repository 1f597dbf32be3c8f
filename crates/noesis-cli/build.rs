//! Start-up time is a product feature (see bench/): in optimised builds on
//! Linux the binary's ~58,000 relative relocations are packed (DT_RELR,
//! glibc 2.36+, binutils 2.38+), so the loader reads a few kilobytes
//! instead of a 1.4 MB table at every start.

fn main() {
    let linux = std::env::var("CARGO_CFG_TARGET_OS").is_ok_and(|os| os == "linux");
    let gnu = std::env::var("CARGO_CFG_TARGET_ENV").is_ok_and(|env| env == "gnu");
    let optimised = std::env::var("PROFILE").is_ok_and(|p| p == "release");
    if linux && gnu && optimised && std::env::var_os("NOESIS_NO_RELR").is_none() {
        println!("cargo:rustc-link-arg-bin=noesis=-Wl,-z,pack-relative-relocs");
    }
    println!("cargo:rerun-if-env-changed=NOESIS_NO_RELR");
}
