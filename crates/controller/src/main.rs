//! `tranched --config FILE`

/// See [`tranche_controller::alloc`].
#[global_allocator]
static GLOBAL: tranche_controller::alloc::Alloc = tranche_controller::alloc::Alloc;

fn main() {
    tranche_controller::cli::main()
}
