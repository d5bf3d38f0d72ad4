//! `ferrobay events`: the cluster's event log, oldest of the page first, like a log file;
//! `--follow` keeps printing new events as they come.

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use clap::Args;
use control::api::ApiClient;
use meta::schema::{Event, EventPage, EventQuery};

use crate::cluster::{self, usage};

/// How often `--follow` asks for new events.
const FOLLOW_POLL: Duration = Duration::from_secs(1);

#[derive(Args, Debug)]
pub struct EventsArgs {
    /// The metadata store, etcd://HOST:PORT[,HOST:PORT] or embedded:DIR.
    #[arg(long, conflicts_with = "api")]
    pub meta: Option<String>,
    /// A processor node's (or `ferrobay up`'s) HTTP API, ADDR:PORT.
    #[arg(long)]
    pub api: Option<String>,
    /// With --api: file with the API token (default: $FERROBAY_API_TOKEN, else
    /// ./ferrobay-data/api-token when it exists).
    #[arg(long, requires = "api")]
    pub api_token_file: Option<PathBuf>,
    /// How many of the newest events to show (1 to 1000).
    #[arg(long, default_value_t = 20)]
    pub limit: usize,
    /// Only events with a greater id.
    #[arg(long, default_value_t = 0)]
    pub since: u64,
    /// Keep running and print new events as they are recorded (Ctrl-C stops).
    #[arg(long, short = 'f')]
    pub follow: bool,
    /// One JSON object per line instead of text.
    #[arg(long)]
    pub json: bool,
}

enum Source {
    Meta(Arc<dyn meta::MetaStore>),
    /// Boxed: the HTTP client is much larger than the store handle.
    Api(Box<ApiClient>),
}

impl Source {
    /// Events with ids in `(since, before)`, newest first, at most `limit`.
    async fn page(
        &self,
        since: u64,
        before: Option<u64>,
        limit: usize,
    ) -> anyhow::Result<EventPage> {
        Ok(match self {
            Source::Meta(store) => {
                let q = EventQuery {
                    since,
                    before,
                    limit,
                };
                control::events::list(store.as_ref(), q).await?
            }
            Source::Api(c) => c.events(since, before, limit).await?,
        })
    }
}

fn line(e: &Event, json: bool) -> String {
    if json {
        return serde_json::to_string(e).unwrap_or_default();
    }
    let severity = serde_json::to_value(e.event.severity)
        .ok()
        .and_then(|v| v.as_str().map(str::to_string))
        .unwrap_or_default();
    let subject = serde_json::to_value(e.event.subject.kind)
        .ok()
        .and_then(|v| v.as_str().map(str::to_string))
        .unwrap_or_default();
    format!(
        "{:>6}  {}  {:<7}  {:<16}  {}:{}  {}",
        e.id,
        storage_node::text::unix_ms_text(e.event.time_unix_ms),
        severity,
        e.event.kind,
        subject,
        e.event.subject.name,
        e.event.message
    )
}

pub async fn run(a: EventsArgs) -> anyhow::Result<ExitCode> {
    if !(1..=meta::schema::MAX_PAGE).contains(&a.limit) {
        return Err(usage(format!(
            "--limit {}: give 1 to {}",
            a.limit,
            meta::schema::MAX_PAGE
        )));
    }
    let source = match (&a.meta, &a.api) {
        (Some(url), _) => Source::Meta(cluster::open_store(url).await?),
        (None, Some(addr)) => {
            let token = cluster::client_token(
                a.api_token_file.as_deref(),
                &[std::path::Path::new(cluster::UP_TOKEN_FILE)],
            )?;
            Source::Api(Box::new(ApiClient::new(addr.clone()).with_token(token)))
        }
        (None, None) => return Err(usage("events need --meta URL or --api ADDR")),
    };
    let page = source.page(a.since, None, a.limit).await?;
    for e in page.events.iter().rev() {
        println!("{}", line(e, a.json));
    }
    if !a.follow {
        return Ok(ExitCode::SUCCESS);
    }
    let mut last = page.last_id.max(a.since);
    let stop = cluster::stop_signal();
    tokio::pin!(stop);
    loop {
        tokio::select! {
            () = &mut stop => return Ok(ExitCode::SUCCESS),
            () = tokio::time::sleep(FOLLOW_POLL) => {}
        }
        // Everything newer than `last`, oldest first, however many arrived.
        let mut fresh: Vec<Event> = Vec::new();
        let mut before = None;
        loop {
            let p = source.page(last, before, meta::schema::MAX_PAGE).await?;
            fresh.extend(p.events);
            match p.next_before {
                Some(b) => before = Some(b),
                None => break,
            }
        }
        for e in fresh.iter().rev() {
            println!("{}", line(e, a.json));
            last = last.max(e.id);
        }
    }
}
