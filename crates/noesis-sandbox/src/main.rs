//! `noesis-sandbox`: the helper that confines a command chosen by a model
//! (see `noesis_sandbox::helper`). noesis starts it; it is not meant to be
//! run by hand.

fn main() {
    noesis_sandbox::helper::main()
}
