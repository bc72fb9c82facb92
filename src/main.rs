//! `ptsd`: the command-line front end of the ptsd storage stack.

use anyhow::Result;
use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(
    name = "ptsd",
    version,
    about = "A userspace storage stack: emulated SSD, NVM journal, FUSE fs, ublk"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Print the version and exit.
    Version,
}

fn main() -> Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_writer(std::io::stderr)
        .init();
    let cli = Cli::parse();
    match cli.command {
        Command::Version => println!("ptsd {}", env!("CARGO_PKG_VERSION")),
    }
    Ok(())
}
