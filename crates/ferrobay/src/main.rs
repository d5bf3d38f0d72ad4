//! `ferrobay`: the CLI and daemons. Parsing and printing only; the logic lives in the
//! library crates.

mod bench_cmd;
mod cdc_cmd;
mod cli;
mod cluster;
mod cluster_cmd;
mod discover_cmd;
mod events_cmd;
mod node_cmd;
mod predictions_cmd;
mod processor_cmd;
mod qos_cmd;
mod reexec;
mod s3_cmd;
mod up_cmd;
mod volume_cluster_cmd;
mod volume_cmd;
mod volume_text;

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
    if let Err(e) = cluster::trust_ca(cli.ca_cert.as_deref()) {
        eprintln!("ferrobay: {}", error_line(&e));
        return std::process::ExitCode::FAILURE;
    }
    let mut builder = tokio::runtime::Builder::new_multi_thread();
    if cli.command.busy_poll_us() > 0 {
        builder.worker_threads(1);
    }
    let runtime = match builder.enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("ferrobay: cannot start the async runtime: {e}");
            return std::process::ExitCode::FAILURE;
        }
    };
    match runtime.block_on(cli::dispatch(cli.command)) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("ferrobay: {}", error_line(&e));
            if e.downcast_ref::<cluster::UsageError>().is_some() {
                // As clap does for a bad command line.
                std::process::ExitCode::from(cluster::USAGE_EXIT_CODE)
            } else {
                std::process::ExitCode::FAILURE
            }
        }
    }
}

/// One line for a person: the chain of causes joined by ": ", each cause once. Errors of
/// this workspace put their cause into their own message and do not hand it out again
/// as `source()`; a cause that is already in the line (an error from elsewhere that does
/// both) is left out anyway.
fn error_line(e: &anyhow::Error) -> String {
    let mut line = String::new();
    for cause in e.chain() {
        let msg = cause.to_string().replace('\n', "; ");
        let msg = msg.trim();
        if msg.is_empty() || line.contains(msg) {
            continue;
        }
        if !line.is_empty() {
            line.push_str(": ");
        }
        line.push_str(msg);
    }
    line
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

#[cfg(test)]
mod tests {
    use super::error_line;

    /// Displays its cause and also returns it from `source()`.
    #[derive(Debug)]
    struct Embeds(std::io::Error);

    impl std::fmt::Display for Embeds {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            write!(f, "open /x: {}", self.0)
        }
    }

    impl std::error::Error for Embeds {
        fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
            Some(&self.0)
        }
    }

    #[test]
    fn each_cause_once_on_one_line() {
        let io = std::io::Error::new(std::io::ErrorKind::NotFound, "no such file");
        let e = anyhow::Error::new(Embeds(io)).context("assemble volume v");
        assert_eq!(error_line(&e), "assemble volume v: open /x: no such file");
        // Causes that do not repeat each other are all kept, in order.
        let e = anyhow::anyhow!("inner").context("middle").context("outer");
        assert_eq!(error_line(&e), "outer: middle: inner");
        let e = anyhow::anyhow!("two\nlines");
        assert_eq!(error_line(&e), "two; lines");
    }
}
