pub fn sched(_a: &SchedArgs) -> std::process::ExitCode { std::process::ExitCode::SUCCESS }
#[derive(clap::Args)] pub struct SchedArgs {}
