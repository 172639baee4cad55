//! Runs the shared backend conformance suite against `PostgresBackend`, each scenario in a
//! fresh Postgres schema that is dropped afterwards, on an unpartitioned store and again on
//! one partitioned by tenant; and once more over TLS (`verify-full`, through the TLS front of
//! `.ci/pgbouncer-tls.sh`). Needs `MEMORY_PG_URL` (and `MEMORY_PG_TLS_URL`); without it every
//! scenario is skipped with one line on stderr.

use crate::common;

use memory_core::testing::{Setup, TestBackend};
use memory_postgres::{PostgresBackend, PostgresConfig};

/// A fresh store whose memory tables are split into `partitions` hash partitions of the
/// tenant (0: none).
async fn open(setup: Setup, partitions: u16) -> TestBackend {
    let url = std::env::var(common::URL_VAR).expect("the suite checks MEMORY_PG_URL first");
    open_at(&url, setup, partitions).await
}

/// [`open`] on the server at `url`; the schema is dropped through `MEMORY_PG_URL`.
async fn open_at(url: &str, setup: Setup, partitions: u16) -> TestBackend {
    let plain = std::env::var(common::URL_VAR).expect("schemas are dropped through MEMORY_PG_URL");
    let (schema, guard) = common::DropSchema::fresh(&plain);
    let config = PostgresConfig {
        schema,
        pool_size: 4,
        tenant_partitions: partitions,
        ..PostgresConfig::default()
    };
    let store = PostgresBackend::connect(url, setup.embedder, config)
        .await
        .expect("open a fresh store");
    TestBackend::new(std::sync::Arc::new(store)).with_guard(guard)
}

async fn make(setup: Setup) -> TestBackend {
    open(setup, 0).await
}

memory_core::backend_conformance!(
    make,
    requires_env = "MEMORY_PG_URL",
    set_to = "a Postgres URL whose server has pgvector (e.g. start one with .ci/postgres.sh start)"
);

/// The whole suite again on stores whose tables are split into hash partitions of the tenant.
mod partitioned {
    use super::*;

    async fn make(setup: Setup) -> TestBackend {
        open(setup, 4).await
    }

    memory_core::backend_conformance!(
        make,
        requires_env = "MEMORY_PG_URL",
        set_to =
            "a Postgres URL whose server has pgvector (e.g. start one with .ci/postgres.sh start)"
    );
}

/// The whole suite over TLS (`verify-full`), on unpartitioned stores.
mod over_tls {
    use super::*;

    async fn make(setup: Setup) -> TestBackend {
        let url = std::env::var(common::TLS_URL_VAR).expect("the suite checks it first");
        open_at(&url, setup, 0).await
    }

    memory_core::backend_conformance!(
        make,
        requires_env = "MEMORY_PG_TLS_URL",
        set_to = "a verify-full URL of a Postgres with pgvector behind TLS (e.g. eval \"$(.ci/pgbouncer-tls.sh start)\")"
    );
}
