//! `ferrobay predictions`: the failure-prediction grades of every drive and volume member
//! in the cluster, worst first (`docs/prediction.md`).

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Args;
use control::api::ApiClient;

use crate::cluster;

#[derive(Args, Debug)]
pub struct PredictionsArgs {
    /// A processor node's (or `ferrobay up`'s) HTTP API, ADDR:PORT.
    #[arg(long)]
    pub api: String,
    /// File with the API token (default: $FERROBAY_API_TOKEN, else
    /// ./ferrobay-data/api-token when it exists).
    #[arg(long)]
    pub api_token_file: Option<PathBuf>,
    /// Only this node.
    #[arg(long)]
    pub node: Option<String>,
    /// Print the API's answer as JSON.
    #[arg(long)]
    pub json: bool,
}

pub async fn run(a: PredictionsArgs) -> anyhow::Result<ExitCode> {
    let token = cluster::client_token(
        a.api_token_file.as_deref(),
        &[std::path::Path::new(cluster::UP_TOKEN_FILE)],
    )?;
    let client = ApiClient::new(a.api.clone()).with_token(token);
    let nodes = match &a.node {
        Some(name) => vec![client.node_predictions(name).await?],
        None => client.predictions().await?,
    };
    if a.json {
        println!("{}", serde_json::to_string_pretty(&nodes)?);
    } else {
        print!("{}", control::api::text::cluster_predictions_text(&nodes));
    }
    Ok(ExitCode::SUCCESS)
}
