//! TLS to the server as libpq's `sslmode` and `sslrootcert` ask, against a real TLS front
//! (PgBouncer, `.ci/pgbouncer-tls.sh`, which refuses clients without TLS) of the test server:
//! `require`, `verify-ca` and `verify-full` connect and work; a certificate that names another
//! host, or that another CA signed, is refused with an error saying so; `require` refuses a
//! server without TLS, which `prefer` reaches in plain TCP. Needs `MEMORY_PG_TLS_URL` and
//! `MEMORY_PG_TLS_OTHER_CA`; the last test needs `MEMORY_PG_URL` too.

use std::process::Command;

use memory_core::{MemoryBackend, NewMemory, Scope, SearchRequest};
use memory_postgres::{PostgresBackend, PostgresError, SslMode};

use super::{chain, common, config, embedder};

/// A fresh schema, dropped (through `MEMORY_PG_URL`) with the guard.
fn fresh() -> (String, common::DropSchema) {
    common::DropSchema::fresh(&std::env::var(common::URL_VAR).unwrap_or_else(|_| {
        panic!(
            "the TLS tests drop their schemas through {}",
            common::URL_VAR
        )
    }))
}

/// Connects to `url` with a fresh schema, then stores and finds a memory by keyword and by
/// meaning.
async fn works(url: &str) {
    let (schema, _guard) = fresh();
    let store = PostgresBackend::connect(url, embedder(16), config(&schema))
        .await
        .unwrap_or_else(|e| panic!("{url}: {}", chain(&e)));
    let scope = Scope::for_user("tls").unwrap();
    let kept = store
        .store(&scope, NewMemory::new("the parrot is called Kiwi"))
        .await
        .unwrap();
    for req in [
        SearchRequest::keyword("parrot"),
        SearchRequest::semantic("the parrot is called Kiwi"),
    ] {
        let hits = store.search(&scope, &req.limit(3)).await.unwrap();
        assert_eq!(hits.first().map(|h| h.entry.id), Some(kept.id), "{url}");
    }
    store.close();
}

/// What connecting to `url` fails with.
async fn refused(url: &str) -> PostgresError {
    // A schema of its own, dropped even if the connection is wrongly made.
    let (schema, _guard) = fresh();
    PostgresBackend::connect(url, embedder(16), config(&schema))
        .await
        .expect_err(url)
}

#[tokio::test]
async fn require_verify_ca_and_verify_full_connect_over_tls() {
    let Some(tls) = common::TlsServer::from_env() else {
        return;
    };
    let ca = &tls.ca;
    for query in [
        format!("sslmode=verify-full&sslrootcert={ca}"),
        format!("sslmode=verify-ca&sslrootcert={ca}"),
        // A root given to `require` checks the chain (libpq); without one, nothing.
        format!("sslmode=require&sslrootcert={ca}"),
        "sslmode=require".to_owned(),
        // The default, `prefer`: TLS, as the server offers it.
        String::new(),
    ] {
        works(&tls.url(&query)).await;
    }
    // The certificate names 127.0.0.1 too.
    works(&tls.named(
        "127.0.0.1",
        &format!("sslmode=verify-full&sslrootcert={ca}"),
    ))
    .await;
    // The front refuses clients without TLS, so the connections above were encrypted.
    let plain = refused(&tls.url("sslmode=disable")).await;
    assert!(
        matches!(plain, PostgresError::Refused { .. }),
        "{}",
        chain(&plain)
    );
}

/// The certificate names localhost and 127.0.0.1; reached as another name (at the same
/// address, `hostaddr`), `verify-full` refuses it and says which name it wanted and which it
/// got. `verify-ca` checks only the chain, so it connects.
#[tokio::test]
async fn verify_full_refuses_a_certificate_for_another_host() {
    let Some(tls) = common::TlsServer::from_env() else {
        return;
    };
    let ca = &tls.ca;
    let wrong = "ava-wrong-host.invalid";
    let err = refused(&tls.named(wrong, &format!("sslmode=verify-full&sslrootcert={ca}"))).await;
    let msg = chain(&err);
    match &err {
        PostgresError::TlsWrongHost {
            expected,
            presented,
            ..
        } => {
            assert_eq!(expected, wrong);
            assert!(
                presented.contains("localhost") && presented.contains("127.0.0.1"),
                "{msg}"
            );
        }
        other => panic!("not a host name mismatch: {other:?}: {msg}"),
    }
    assert!(
        msg.contains(&format!("not for `{wrong}`")) && msg.contains("verify-full"),
        "{msg}"
    );
    works(&tls.named(wrong, &format!("sslmode=verify-ca&sslrootcert={ca}"))).await;
}

/// A root that did not sign the server's certificate: refused in every mode that checks
/// the chain, the error naming the roots and the mode; never showing the password.
#[tokio::test]
async fn a_certificate_another_ca_signed_is_refused() {
    let Some(tls) = common::TlsServer::from_env() else {
        return;
    };
    let other = &tls.other_ca;
    let with_password = tls
        .base
        .replacen("://postgres@", "://postgres:hunter2-pw@", 1);
    for mode in [SslMode::VerifyFull, SslMode::VerifyCa, SslMode::Require] {
        let url = format!("{with_password}?sslmode={mode}&sslrootcert={other}");
        let err = refused(&url).await;
        let msg = chain(&err);
        assert!(
            matches!(&err, PostgresError::TlsUntrusted { mode: m, roots, .. }
                if *m == mode && roots.contains(other.as_str())),
            "{mode}: {err:?}: {msg}"
        );
        assert!(msg.contains("not signed by the CA in"), "{msg}");
        assert!(!msg.contains("hunter2"), "never the password: {msg}");
    }
    // `prefer` tries plain TCP after the failed handshake (libpq), which the front refuses.
    let err = refused(&tls.url(&format!("sslmode=prefer&sslrootcert={other}"))).await;
    assert!(
        matches!(err, PostgresError::Refused { .. }),
        "{}",
        chain(&err)
    );
    // A root file that cannot be read is named.
    let err = refused(&tls.url("sslmode=verify-full&sslrootcert=/nonexistent/ava-ca.pem")).await;
    let msg = chain(&err);
    assert!(
        matches!(err, PostgresError::TlsSetup { .. }) && msg.contains("/nonexistent/ava-ca.pem"),
        "{msg}"
    );
}

/// Set in a child: `trusted` or `untrusted`, whether its system roots (`SSL_CERT_FILE`, read
/// by rustls-native-certs) are the CA that signed the server's certificate or another one.
const SYSTEM_ROOTS_CHILD: &str = "AVA_PG_TLS_SYSTEM_ROOTS_CHILD";

/// Without `sslrootcert`, `verify-full` checks against the system's roots: in a process whose
/// system roots are the CA that signed the server's certificate it connects (without and with
/// `sslrootcert=system`); in one whose roots are another CA, it is refused, the error naming
/// the system's roots. (Each in a child process: the roots come from its environment.)
#[tokio::test]
async fn verify_full_uses_the_systems_roots_when_no_root_is_given() {
    let Some(tls) = common::TlsServer::from_env() else {
        return;
    };
    match std::env::var(SYSTEM_ROOTS_CHILD).as_deref() {
        Ok("trusted") => {
            works(&tls.url("sslmode=verify-full")).await;
            works(&tls.url("sslrootcert=system")).await;
            return;
        }
        Ok(_) => {
            let err = refused(&tls.url("sslmode=verify-full")).await;
            let msg = chain(&err);
            assert!(
                matches!(&err, PostgresError::TlsUntrusted { roots, .. }
                    if roots == "any of the system's trusted roots"),
                "{msg}"
            );
            return;
        }
        Err(_) => {}
    }
    for (roots, ca) in [("trusted", &tls.ca), ("untrusted", &tls.other_ca)] {
        let status = Command::new(std::env::current_exe().unwrap())
            .args([
                "--exact",
                "server::tls::verify_full_uses_the_systems_roots_when_no_root_is_given",
                "--test-threads",
                "1",
            ])
            .env(SYSTEM_ROOTS_CHILD, roots)
            .env("SSL_CERT_FILE", ca)
            .env_remove("SSL_CERT_DIR")
            .status()
            .unwrap();
        assert!(
            status.success(),
            "the child whose system roots are {ca}: {status}"
        );
    }
}

/// The test server itself offers no TLS: `require` refuses it, saying so;
/// `prefer` (the default) connects in plain TCP.
#[tokio::test]
async fn require_refuses_a_server_without_tls_and_prefer_connects() {
    let Some(url) = common::pg_url() else { return };
    let sep = if url.contains('?') { '&' } else { '?' };
    for mode in [SslMode::Require] {
        let err = refused(&format!("{url}{sep}sslmode={mode}")).await;
        let msg = chain(&err);
        assert!(
            matches!(&err, PostgresError::TlsNotOffered { mode: m, .. } if *m == mode),
            "{mode}: {err:?}: {msg}"
        );
        assert!(msg.contains("does not offer TLS"), "{msg}");
    }
    works(&format!("{url}{sep}sslmode=prefer")).await;
}
