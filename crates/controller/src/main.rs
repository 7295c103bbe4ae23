//! `tranched --config FILE`

fn main() {
    tranche_controller::cli::main()
}
