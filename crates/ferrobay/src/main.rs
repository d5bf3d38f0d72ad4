//! `ferrobay`: the CLI and daemons. Parsing and printing only; the logic lives in the
//! library crates.

mod bench_cmd;
mod cli;
mod cluster;
mod discover_cmd;
mod node_cmd;
mod processor_cmd;
mod s3_cmd;
mod up_cmd;
mod volume_cluster_cmd;
mod volume_cmd;

use clap::Parser;

fn main() -> std::process::ExitCode {
    let cli = cli::Cli::parse();
    // `ferrobay up` talks to a person through its own progress lines: the daemons' info
    // logs would bury them (RUST_LOG=info brings them back).
    let default_level = match cli.command {
        cli::Command::Up(_) => "warn",
        // s3s logs every client error (a 404, a bad signature) as an error: the gateway
        // logs what an operator needs itself.
        cli::Command::S3(_) => "info,s3s=off",
        _ => "info",
    };
    init_logging(cli.log_json, default_level);
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("ferrobay: cannot start the async runtime: {e}");
            return std::process::ExitCode::FAILURE;
        }
    };
    match runtime.block_on(cli::dispatch(cli.command)) {
        Ok(code) => code,
        Err(e) => {
            // One line for a person: the chain of causes joined.
            eprintln!("ferrobay: {e:#}");
            if e.downcast_ref::<cluster::UsageError>().is_some() {
                // As clap does for a bad command line.
                std::process::ExitCode::from(cluster::USAGE_EXIT_CODE)
            } else {
                std::process::ExitCode::FAILURE
            }
        }
    }
}

fn init_logging(json: bool, default_level: &str) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default_level));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_writer(std::io::stderr);
    if json {
        builder.json().init();
    } else {
        builder.init();
    }
}
