//! Integration tests of the metadata store: one conformance suite run against the embedded
//! backend (on a manual and on the system clock) and against a real etcd server, plus
//! backend-specific failure tests.

mod cases;
mod embedded;
mod env;
mod etcd;

/// Runs each named case of `cases` against every backend.
macro_rules! conformance {
    ($($case:ident),* $(,)?) => {
        mod embedded_manual_clock {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $case() {
                    crate::cases::$case(crate::env::Env::embedded_manual().await).await;
                }
            )*
        }
        mod embedded_system_clock {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $case() {
                    crate::cases::$case(crate::env::Env::embedded_system().await).await;
                }
            )*
        }
        mod etcd_server {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $case() {
                    crate::cases::$case(crate::env::Env::etcd().await).await;
                }
            )*
        }
    };
}

conformance!(
    put_get_list_delete,
    invalid_requests_are_refused,
    compare_and_swap,
    cas_races_have_one_winner,
    watch_orders_and_resumes,
    compacted_watch_asks_to_resync,
    lease_expiry_deletes_keys,
    keeper_keeps_and_revokes,
    keeper_reports_loss_before_expiry,
    ownership_handover,
    ownership_race_has_one_winner,
    ownership_seized_from_a_dead_owner,
    event_log_pages_and_trims,
);
